/* The walk of one DWARF unit (tree.Tree._walk_unit) in C: the same loop over its DIEs
 * by the same plans, giving the same arrays (0.25 s for the 3.7 million DIEs of a
 * 32 MB .debug_info, its Python side included, against 2 s); and the loops over what
 * it kept that a large binary's listing or plan runs millions of times: each inlined
 * copy followed to its function (origins, group), the DIEs referring to some
 * (refers, referring), the qualified names of many DIEs (codes, qualify), pairs into
 * tables (fold).
 *
 * It reads only what it is sure of. Anything else -- a DW_FORM_indirect, a name or a
 * reference in a form it does not read, a value past the end of its section or too
 * large for the arrays, an abbreviation code without a plan -- and it answers None:
 * the Python walk then reads that unit and says what it says (tree.py). So an answer
 * from here is always the Python walk's; tests/test_native.py compares the two on
 * every test program and on generated units.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { SKIP, NAME, ORIGIN, SPEC, BASE, LOW, DECL };  /* steps.py's roles */

#define SUBPROGRAM 0x2E
#define INLINED 0x1D
#define DECLARED (1u << 16)
#define PARENT (1u << 17)
#define NO_NAME (-1)
#define TEXT (-2)

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int put(Buf *b, const void *v, size_t size)
{
    if (b->n + size > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + size)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, v, size);
    b->n += size;
    return 0;
}

#define PUT(b, v) do { __typeof__(v) v_ = (v); if (put((b), &v_, sizeof v_)) goto fail; } while (0)
#define GIVE_UP goto fail

typedef struct {
    const uint8_t *d;
    size_t len;
} Bytes;

/* The little-endian value of ``n`` bytes at ``pos``; -1 when past the end. */
static int word(Bytes s, size_t pos, int n, uint64_t *out)
{
    if (n < 0 || n > 8 || pos > s.len || s.len - pos < (size_t)n)
        return -1;
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | s.d[pos + i];
    *out = v;
    return 0;
}

/* A ULEB128 of at most 63 bits at ``*pos``, ``*pos`` moved past it; -1 otherwise. */
static int uleb(Bytes s, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (*pos >= s.len)
            return -1;
        uint8_t b = s.d[(*pos)++];
        v |= (uint64_t)(b & 0x7F) << shift;  /* at most 63 bits: no bit is lost */
        if (b < 0x80) {
            if (v > (uint64_t)INT64_MAX)
                return -1;
            *out = v;
            return 0;
        }
    }
    return -1;
}

typedef struct {
    int osize, asize, refaddr;
} Shape;

/* scan.fixed_size: the size of a value of ``form``, or -1 when it varies. */
static int fixed_size(uint64_t form, Shape u)
{
    switch (form) {
    case 0x19: case 0x21: return 0;
    case 0x0B: case 0x0C: case 0x11: case 0x25: case 0x29: return 1;
    case 0x05: case 0x12: case 0x26: case 0x2A: return 2;
    case 0x27: case 0x2B: return 3;
    case 0x06: case 0x13: case 0x1C: case 0x28: case 0x2C: return 4;
    case 0x07: case 0x14: case 0x20: case 0x24: return 8;
    case 0x1E: return 16;
    case 0x0E: case 0x17: case 0x1D: case 0x1F: case 0x1F20: case 0x1F21: return u.osize;
    case 0x01: return u.asize;
    case 0x10: return u.refaddr;
    default: return -1;
    }
}

/* scan._skip: where the value of ``form`` at ``pos`` ends; -1 for what Python reads. */
static int skip(Bytes s, size_t *pos, uint64_t form, Shape u)
{
    int size = fixed_size(form, u);
    size_t p = *pos;
    uint64_t n;
    if (size >= 0) {
        p += (size_t)size;
    } else {
        switch (form) {
        case 0x0D: case 0x0F: case 0x15: case 0x1A: case 0x1B: case 0x22: case 0x23:
        case 0x1F01: case 0x1F02:  /* one LEB128 */
            while (p < s.len && s.d[p] & 0x80)
                p++;
            if (p >= s.len)
                return -1;
            p++;
            break;
        case 0x08: {  /* a string */
            if (p >= s.len)
                return -1;
            const uint8_t *end = memchr(s.d + p, 0, s.len - p);
            if (end == NULL)
                return -1;
            p = (size_t)(end - s.d) + 1;
            break;
        }
        case 0x09: case 0x18:  /* block, exprloc: a LEB128 length first */
            if (uleb(s, &p, &n) || n > s.len)
                return -1;
            p += (size_t)n;
            break;
        case 0x0A: case 0x03: case 0x04: {  /* block1, block2, block4 */
            int w = form == 0x0A ? 1 : form == 0x03 ? 2 : 4;
            if (word(s, p, w, &n))
                return -1;
            p += (size_t)w + (size_t)n;
            break;
        }
        default:  /* indirect, or a form scan does not know */
            return -1;
        }
    }
    if (p > s.len)
        return -1;
    *pos = p;
    return 0;
}

/* The plans (steps.plans) as encoded by tree.py: an index of the number of codes,
 * then each code's offset in the entries (-1: none); there its tag, children, fixed,
 * tail, keep, steps, then per step (bytes before it, role, form, size or -1). */
typedef struct {
    const int64_t *index, *v;
    Py_ssize_t codes, n;
} Plans;

static const int64_t *plan_of(Plans pl, uint64_t code)
{
    if (code >= (uint64_t)pl.codes)
        return NULL;
    int64_t at = pl.index[1 + code];
    if (at < 0 || at > pl.n - 6 || pl.v[at + 5] < 0 || pl.v[at + 5] > (pl.n - at - 6) / 4)
        return NULL;
    return pl.v + at;
}

static PyObject *bytes_of(Buf *b)
{
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->n);
}

/* The bytes of ``b``; NULL with a MemoryError when a PUT into it failed (not ``ok``). */
static PyObject *answer(int ok, Buf *b)
{
    return ok ? bytes_of(b) : PyErr_NoMemory();
}

/* ``answer`` of two buffers: a tuple of their bytes. */
static PyObject *answer_pair(int ok, Buf *a, Buf *b)
{
    return ok ? Py_BuildValue("(NN)", bytes_of(a), bytes_of(b)) : PyErr_NoMemory();
}

/* walk(info, first, end, unit, osize, asize, refaddr, str_base, index, entries,
 *      offsets, line_str) -> (ats, tags, parents, names, refs, lows, named, inlined, texts, odd)
 * or None: the unit's kept DIEs as the bytes of tree.py's arrays, (low_pc, DIE) and
 * (name, DIE) pairs, the inlined copies, (DIE, .debug_line_str offset) pairs of names
 * kept aside, and whether a low_pc was in a form not read. */
static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer info_b, index_b, plans_b, offsets_b, line_b;
    Py_ssize_t first, end_, unit_at;
    int osize, asize, refaddr;
    long long str_base;
    if (!PyArg_ParseTuple(args, "y*nnniiiLy*y*y*y*", &info_b, &first, &end_, &unit_at,
                          &osize, &asize, &refaddr, &str_base, &index_b, &plans_b,
                          &offsets_b, &line_b))
        return NULL;
    Bytes s = {info_b.buf, (size_t)info_b.len};
    Bytes offsets = {offsets_b.buf, (size_t)offsets_b.len};
    Bytes line = {line_b.buf, (size_t)line_b.len};
    Plans pl = {index_b.buf, plans_b.buf, index_b.len / (Py_ssize_t)sizeof(int64_t),
                plans_b.len / (Py_ssize_t)sizeof(int64_t)};
    Shape u = {osize, asize, refaddr};
    Buf ats = {0}, tags = {0}, parents = {0}, names = {0}, refs = {0}, lows = {0},
        named = {0}, inlined = {0}, texts = {0}, stack = {0};
    int odd = 0, ok = 0;
    PyObject *out = NULL;

    Py_BEGIN_ALLOW_THREADS
    size_t pos = (size_t)first, end = (size_t)end_;
    int64_t parent = -1;
    if (pl.codes < 1 || pl.index[0] < 0 || pl.index[0] > pl.codes - 1)
        GIVE_UP;
    pl.codes = pl.index[0];
    if (unit_at < 0 || first < 0 || end_ < 0 || end > s.len)
        GIVE_UP;
    while (pos < end) {
        uint64_t at = pos, code;
        if (uleb(s, &pos, &code))
            GIVE_UP;
        if (code == 0) {
            if (stack.n) {
                stack.n -= sizeof(int64_t);
                parent = stack.n ? ((int64_t *)stack.p)[stack.n / sizeof(int64_t) - 1] : -1;
            }
            continue;
        }
        const int64_t *plan = plan_of(pl, code);
        if (plan == NULL)
            GIVE_UP;
        int64_t tag = plan[0], children = plan[1], fixed = plan[2], tail = plan[3];
        int64_t keep = plan[4], nsteps = plan[5];
        const int64_t *step = plan + 6;
        int64_t name = NO_NAME, ref = -1;
        uint64_t low = 0;
        int has_low = 0;
        uint32_t declared = 0;
        if (fixed >= 0) {
            pos += (size_t)fixed;
            if (!keep)
                continue;
        } else {
            uint64_t str_base_now = (uint64_t)str_base;
            for (int64_t k = 0; k < nsteps; k++, step += 4) {
                int64_t before = step[0], role = step[1], size = step[3];
                uint64_t form = (uint64_t)step[2], v;
                pos += (size_t)before;
                if (pos > s.len || form == 0x16)
                    GIVE_UP;
                if (!keep || role == SKIP) {
                    if (skip(s, &pos, form, u))
                        GIVE_UP;
                    continue;
                }
                if (role == NAME) {
                    if (form == 0x0E) {  /* strp */
                        if (word(s, pos, osize, &v) || v > (uint64_t)INT64_MAX)
                            GIVE_UP;
                        name = (int64_t)v;
                    } else if (form == 0x08) {  /* in .debug_info: -(pos + 3) */
                        name = -(int64_t)pos - 3;
                    } else if (form == 0x1F) {  /* .debug_line_str: kept aside */
                        if (word(s, pos, osize, &v) || v >= line.len ||
                            memchr(line.d + v, 0, line.len - v) == NULL)
                            GIVE_UP;
                        PUT(&texts, (uint64_t)at);
                        PUT(&texts, v);
                        name = TEXT;
                    } else if ((form >= 0x25 && form <= 0x28) || form == 0x1A) {  /* strx */
                        size_t p = pos;
                        if (form == 0x1A) {
                            if (uleb(s, &p, &v))
                                GIVE_UP;
                        } else if (word(s, pos, (int)(form - 0x24), &v)) {
                            GIVE_UP;
                        }
                        if (v > (uint64_t)INT32_MAX || str_base_now > (uint64_t)INT32_MAX * 4)
                            GIVE_UP;
                        uint64_t where = str_base_now + v * (uint64_t)osize;
                        if (word(offsets, (size_t)where, osize, &v) || v > (uint64_t)INT64_MAX)
                            GIVE_UP;
                        name = (int64_t)v;
                    } else {
                        GIVE_UP;
                    }
                } else if (role == ORIGIN || role == SPEC) {
                    int w = form == 0x11 ? 1 : form == 0x12 ? 2 : form == 0x13 ? 4 :
                        form == 0x14 ? 8 : 0;
                    int64_t got;
                    int have = 1;
                    if (w) {
                        if (word(s, pos, w, &v) || v > (uint64_t)(INT64_MAX - unit_at))
                            GIVE_UP;
                        got = unit_at + (int64_t)v;
                    } else if (form == 0x15) {
                        size_t p = pos;
                        if (uleb(s, &p, &v) || v > (uint64_t)(INT64_MAX - unit_at))
                            GIVE_UP;
                        got = unit_at + (int64_t)v;
                    } else if (form == 0x10) {
                        if (word(s, pos, refaddr, &v) || v > (uint64_t)INT64_MAX)
                            GIVE_UP;
                        got = (int64_t)v;
                    } else {
                        have = 0;  /* another file's, or not a reference */
                        got = -1;
                    }
                    if (have && (role == ORIGIN || ref < 0))
                        ref = got;
                } else if (role == DECL) {
                    if (form == 0x19)
                        declared = DECLARED;
                    else if (pos >= s.len)
                        GIVE_UP;
                    else
                        declared = s.d[pos] ? DECLARED : 0;
                } else if (role == LOW) {
                    if (form == 0x01) {
                        if (word(s, pos, asize, &v))
                            GIVE_UP;
                        low = v;
                        has_low = 1;
                    } else {
                        odd = 1;
                    }
                } else {  /* BASE: the unit's base in .debug_str_offsets */
                    if (word(s, pos, osize, &v))
                        GIVE_UP;
                    str_base_now = v;
                }
                if (size >= 0) {
                    pos += (size_t)size;
                    if (pos > s.len)
                        GIVE_UP;
                } else if (skip(s, &pos, form, u)) {
                    GIVE_UP;
                }
            }
            str_base = (long long)str_base_now;
            pos += (size_t)tail;
            if (!keep)
                continue;
        }
        uint64_t shown = (children ? (uint64_t)tag | PARENT : (uint64_t)tag) | declared;
        if (tag < 0 || shown > UINT32_MAX)
            GIVE_UP;  /* past the tags array's 32 bits */
        PUT(&ats, at);
        PUT(&tags, (uint32_t)shown);
        PUT(&parents, parent);
        PUT(&names, name);
        PUT(&refs, ref);
        if (has_low) {
            PUT(&lows, low);
            PUT(&lows, at);
        }
        if (tag == SUBPROGRAM && ref < 0 && name != NO_NAME) {
            PUT(&named, name);
            PUT(&named, (int64_t)at);
        }
        if (tag == INLINED)
            PUT(&inlined, at);
        if (children) {
            PUT(&stack, (int64_t)at);
            parent = (int64_t)at;
        }
    }
    ok = 1;
fail:
    Py_END_ALLOW_THREADS
    if (ok)
        out = Py_BuildValue("(NNNNNNNNNO)", bytes_of(&ats), bytes_of(&tags),
                            bytes_of(&parents), bytes_of(&names), bytes_of(&refs),
                            bytes_of(&lows), bytes_of(&named), bytes_of(&inlined),
                            bytes_of(&texts), odd ? Py_True : Py_False);
    free(ats.p); free(tags.p); free(parents.p); free(names.p); free(refs.p);
    free(lows.p); free(named.p); free(inlined.p); free(texts.p); free(stack.p);
    PyBuffer_Release(&info_b);
    PyBuffer_Release(&index_b);
    PyBuffer_Release(&plans_b);
    PyBuffer_Release(&offsets_b);
    PyBuffer_Release(&line_b);
    if (ok && out == NULL)
        return NULL;  /* out of memory making the answer */
    if (!ok)
        Py_RETURN_NONE;
    return out;
}

/* The index of ``key`` in the ascending ``v`` of ``n``; -1 when not there. */
static Py_ssize_t find(const uint64_t *v, Py_ssize_t n, uint64_t key)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == key ? lo : -1;
}

/* Whether ``key`` is in one of ``ranges``' ``spans`` ascending (start, end) pairs. */
static int within(const uint64_t *ranges, Py_ssize_t spans, int64_t key)
{
    Py_ssize_t lo = 0, hi = spans;
    while (lo < hi) {  /* the last range starting at or before it */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ranges[2 * mid] <= (uint64_t)key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return key >= 0 && lo > 0 && (uint64_t)key < ranges[2 * (lo - 1) + 1];
}

/* origins(inlined, ats, refs, ranges) -> (copies, keys): asks._copies' loop. Of the
 * copies ``inlined`` in ``ranges`` (ascending (start, end) pairs: the units of a part),
 * in their order, each and the DIE its references lead to: four steps at most, each
 * through a kept DIE of ``ats`` (ascending) whose reference is in ``refs``; -1 when
 * that DIE is not in ``ranges``. */
static PyObject *origins(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer inlined_b, ats_b, refs_b, ranges_b;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &inlined_b, &ats_b, &refs_b, &ranges_b))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = inlined_b.len / 8, kept = ats_b.len / 8, spans = ranges_b.len / 16;
    Buf copies = {0}, keys = {0};
    int ok = 0;
    if (refs_b.len / 8 != kept) {
        PyErr_SetString(PyExc_ValueError, "as many references as DIEs");
        goto done;
    }
    const uint64_t *inlined = inlined_b.buf, *ats = ats_b.buf, *ranges = ranges_b.buf;
    const int64_t *refs = refs_b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t key = (int64_t)inlined[i];
        if (!within(ranges, spans, key))
            continue;
        for (int step = 0; step < 4; step++) {
            Py_ssize_t k = key >= 0 ? find(ats, kept, (uint64_t)key) : -1;
            if (k < 0 || refs[k] < 0)
                break;
            key = refs[k];
        }
        PUT(&copies, inlined[i]);
        PUT(&keys, within(ranges, spans, key) ? key : (int64_t)-1);
    }
    ok = 1;
fail:
    Py_END_ALLOW_THREADS
    out = answer_pair(ok, &copies, &keys);
done:
    free(copies.p);
    free(keys.p);
    PyBuffer_Release(&inlined_b);
    PyBuffer_Release(&ats_b);
    PyBuffer_Release(&refs_b);
    PyBuffer_Release(&ranges_b);
    return out;
}

/* What qualify reads: the kept DIEs of the units walked, ascending, as tree.Kept's
 * arrays; the names already read; how to read one that is not; each DIE's prefix made. */
typedef struct {
    const uint64_t *ats;
    const uint32_t *tags;
    const int64_t *parents, *names;
    Py_ssize_t n;
    PyObject *known, *decode, **prefix;
} Names;

/* Whether ``tag`` is a unit's own DIE's (steps.UNIT_TAGS): no scope. */
static int unit_tag(uint32_t tag)
{
    return tag == 0x11 || tag == 0x41 || tag == 0x3C;
}

/* The kept DIEs of the units walked, as qualify and codes take them after the DIEs
 * asked about: tree.Kept's offsets (ascending), tags, parents and name codes. */
typedef struct {
    Py_buffer todo, ats, tags, parents, names;
} KeptArgs;

/* ``a``'s arrays of one length (``*n`` DIEs): 0; -1 with a ValueError otherwise. */
static int kept_checked(KeptArgs *a, Py_ssize_t *n)
{
    *n = a->ats.len / 8;
    if (a->tags.len / 4 != *n || a->parents.len / 8 != *n || a->names.len / 8 != *n) {
        PyErr_SetString(PyExc_ValueError, "kept arrays of one length");
        return -1;
    }
    return 0;
}

static void kept_released(KeptArgs *a)
{
    PyBuffer_Release(&a->todo);
    PyBuffer_Release(&a->ats);
    PyBuffer_Release(&a->tags);
    PyBuffer_Release(&a->parents);
    PyBuffer_Release(&a->names);
}

/* Tree._decoded: a new reference to the name of kept DIE ``k`` (Py_None: it has
 * none), from ``known`` or else ``decode``; NULL with an exception set. */
static PyObject *decoded(Names *t, Py_ssize_t k)
{
    int64_t code = t->names[k];
    if (code == NO_NAME)
        Py_RETURN_NONE;
    PyObject *key = PyLong_FromLongLong(code);
    if (key == NULL)
        return NULL;
    PyObject *got = code >= 0 ? PyDict_GetItemWithError(t->known, key) : NULL;
    if (got != NULL) {
        Py_DECREF(key);
        Py_INCREF(got);
        return got;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *at = PyLong_FromUnsignedLongLong(t->ats[k]);
    got = at ? PyObject_CallFunctionObjArgs(t->decode, at, key, NULL) : NULL;
    Py_XDECREF(at);
    Py_DECREF(key);
    if (got != NULL && got != Py_None && !PyUnicode_Check(got)) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "a name that is not a string");
        return NULL;
    }
    return got;
}

/* "outer::own", else whichever is not empty or None, else "". */
static PyObject *joined(PyObject *outer, PyObject *own)
{
    int has_outer = outer != Py_None && PyUnicode_GET_LENGTH(outer) > 0;
    int has_own = own != Py_None && PyUnicode_GET_LENGTH(own) > 0;
    if (has_outer && has_own) {
        static PyObject *sep = NULL;
        if (sep == NULL && (sep = PyUnicode_InternFromString("::")) == NULL)
            return NULL;
        PyObject *head = PyUnicode_Concat(outer, sep);
        PyObject *got = head != NULL ? PyUnicode_Concat(head, own) : NULL;
        Py_XDECREF(head);
        return got;
    }
    PyObject *got = has_outer ? outer : has_own ? own : NULL;
    if (got == NULL)
        return PyUnicode_FromStringAndSize("", 0);
    Py_INCREF(got);
    return got;
}

/* Tree._scope: a new reference to the names of the DIEs ``offset`` is in and its own,
 * joined ("" at a unit); NULL with an exception set, or with none when too deep. */
static PyObject *scope(Names *t, int64_t offset, int depth)
{
    Py_ssize_t k = offset >= 0 ? find(t->ats, t->n, (uint64_t)offset) : -1;
    uint32_t tag = k >= 0 ? t->tags[k] & 0xFFFF : 0;
    if (k < 0 || unit_tag(tag))
        return PyUnicode_FromStringAndSize("", 0);
    if (t->prefix[k] != NULL) {
        Py_INCREF(t->prefix[k]);
        return t->prefix[k];
    }
    if (depth > 256)
        return NULL;  /* nested past any compiler's: Python's walk says what it says */
    PyObject *outer = scope(t, t->parents[k], depth + 1);
    if (outer == NULL)
        return NULL;
    PyObject *own = decoded(t, k);
    PyObject *got = own != NULL ? joined(outer, own) : NULL;
    Py_DECREF(outer);
    Py_XDECREF(own);
    if (got != NULL) {
        Py_INCREF(got);
        t->prefix[k] = got;
    }
    return got;
}

/* qualify(todo, ats, tags, parents, names, nested, known, decode) -> list or None:
 * Tree.names_of's loop. For each DIE of ``todo``, its qualified name ("?" for no name
 * of its own; without ``nested``, only its own), or None when it is not kept; None for
 * the whole when scopes nest too deep to follow here. */
static PyObject *qualify(PyObject *Py_UNUSED(self), PyObject *args)
{
    KeptArgs a;
    int nested;
    PyObject *known, *decode;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*pO!O", &a.todo, &a.ats, &a.tags, &a.parents,
                          &a.names, &nested, &PyDict_Type, &known, &decode))
        return NULL;
    Names t = {a.ats.buf, a.tags.buf, a.parents.buf, a.names.buf, 0, known, decode, NULL};
    Py_ssize_t n = a.todo.len / 8;
    const uint64_t *todo = a.todo.buf;
    PyObject *out = NULL;
    if (kept_checked(&a, &t.n) < 0)
        goto done;
    t.prefix = PyMem_Calloc((size_t)t.n + 1, sizeof(PyObject *));
    out = t.prefix ? PyList_New(n) : PyErr_NoMemory();
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        Py_ssize_t k = find(t.ats, t.n, todo[i]);
        PyObject *got;
        if (k < 0) {
            got = Py_None;
            Py_INCREF(got);
        } else {
            PyObject *own = decoded(&t, k), *prefix = NULL;
            if (own == Py_None || (own != NULL && PyUnicode_GET_LENGTH(own) == 0)) {
                Py_DECREF(own);
                own = PyUnicode_FromString("?");
            }
            if (own != NULL)
                prefix = nested ? scope(&t, t.parents[k], 0) : PyUnicode_FromString("");
            got = prefix != NULL ? joined(prefix, own) : NULL;
            Py_XDECREF(own);
            Py_XDECREF(prefix);
        }
        if (got == NULL) {
            Py_CLEAR(out);
            if (!PyErr_Occurred()) {  /* too deep: the whole left to Python */
                out = Py_None;
                Py_INCREF(out);
            }
            break;
        }
        PyList_SET_ITEM(out, i, got);
    }
    if (t.prefix != NULL)
        for (Py_ssize_t k = 0; k < t.n; k++)
            Py_XDECREF(t.prefix[k]);
    PyMem_Free(t.prefix);
done:
    kept_released(&a);
    return out;
}

/* codes(todo, ats, tags, parents, names, nested) -> bytes: the name codes of the kept
 * DIEs of ``todo`` (in ``ats``, ascending, with their ``tags``, ``parents`` and
 * ``names``) and, when ``nested``, of the scopes they are in up to their unit's
 * (those qualify reads), each once. */
static PyObject *codes(PyObject *Py_UNUSED(self), PyObject *args)
{
    KeptArgs a;
    int nested;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*p", &a.todo, &a.ats, &a.tags, &a.parents,
                          &a.names, &nested))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = a.todo.len / 8, kept;
    Buf got = {0};
    uint8_t *seen = NULL;
    if (kept_checked(&a, &kept) < 0)
        goto done;
    seen = calloc((size_t)kept + 1, 1);
    if (seen == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const uint64_t *todo = a.todo.buf, *ats = a.ats.buf;
    const uint32_t *tags = a.tags.buf;
    const int64_t *parents = a.parents.buf, *names = a.names.buf;
    int ok = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = find(ats, kept, todo[i]);
        for (int depth = 0; k >= 0 && !seen[k] && depth < (nested ? 256 : 1); depth++) {
            uint32_t tag = tags[k] & 0xFFFF;
            if (depth && unit_tag(tag))
                break;  /* a unit's own name is no scope's */
            seen[k] = 1;
            PUT(&got, names[k]);
            k = parents[k] >= 0 ? find(ats, kept, (uint64_t)parents[k]) : -1;
        }
    }
    ok = 1;
fail:
    out = answer(ok, &got);
done:
    free(got.p);
    free(seen);
    kept_released(&a);
    return out;
}

/* table.setdefault(key, []).append(value): 0; -1 with an exception set. */
static int appended(PyObject *table, PyObject *key, PyObject *value)
{
    PyObject *list = PyDict_GetItemWithError(table, key);  /* borrowed */
    if (list == NULL && !PyErr_Occurred()) {
        PyObject *made = PyList_New(0);
        if (made != NULL && PyDict_SetItem(table, key, made) == 0)
            list = made;  /* the dict holds it */
        Py_XDECREF(made);
    }
    return list != NULL ? PyList_Append(list, value) : -1;
}

/* group(copies, keys, resolve) -> dict: asks.whole_index's last loop. Each copy of
 * ``copies`` under its key of ``keys`` (as ``resolve(copy)`` says where it is -1), in
 * order: {key: [copy, ...]}. */
static PyObject *group(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer copies_b, keys_b;
    PyObject *resolve;
    if (!PyArg_ParseTuple(args, "y*y*O", &copies_b, &keys_b, &resolve))
        return NULL;
    Py_ssize_t n = copies_b.len / 8;
    const uint64_t *copies = copies_b.buf;
    const int64_t *keys = keys_b.buf;
    PyObject *out = NULL;
    if (keys_b.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "as many keys as copies");
        goto done;
    }
    out = PyDict_New();
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *at = PyLong_FromUnsignedLongLong(copies[i]), *key = NULL;
        if (at != NULL)
            key = keys[i] >= 0 ? PyLong_FromLongLong(keys[i])
                               : PyObject_CallOneArg(resolve, at);
        if (key == NULL || appended(out, key, at) < 0)
            Py_CLEAR(out);
        Py_XDECREF(at);
        Py_XDECREF(key);
    }
done:
    PyBuffer_Release(&copies_b);
    PyBuffer_Release(&keys_b);
    return out;
}

/* fold(pairs, table): for each (key, value) of ``pairs`` (8-byte signed numbers),
 * table.setdefault(key, []).append(value), in order. */
static PyObject *fold(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer pairs_b;
    PyObject *table;
    if (!PyArg_ParseTuple(args, "y*O!", &pairs_b, &PyDict_Type, &table))
        return NULL;
    Py_ssize_t n = pairs_b.len / 16;
    const int64_t *v = pairs_b.buf;
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *key = PyLong_FromLongLong(v[2 * i]);
        PyObject *value = PyLong_FromLongLong(v[2 * i + 1]);
        ok = key != NULL && value != NULL && appended(table, key, value) == 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
    }
    PyBuffer_Release(&pairs_b);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* refers(ats, refs) -> (ats, refs): of kept DIEs, those that refer to another (a
 * reference not -1), and what each refers to. */
static PyObject *refers(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer ats_b, refs_b;
    if (!PyArg_ParseTuple(args, "y*y*", &ats_b, &refs_b))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ats_b.len / 8;
    Buf ats = {0}, refs = {0};
    int ok = 0;
    if (refs_b.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "as many references as DIEs");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = ((const int64_t *)refs_b.buf)[i];
        if (r >= 0) {
            PUT(&ats, ((const uint64_t *)ats_b.buf)[i]);
            PUT(&refs, r);
        }
    }
    ok = 1;
fail:
    out = answer_pair(ok, &ats, &refs);
done:
    free(ats.p);
    free(refs.p);
    PyBuffer_Release(&ats_b);
    PyBuffer_Release(&refs_b);
    return out;
}

/* referring(targets, ats, refs) -> bytes: the DIEs of ``ats`` whose reference (in
 * ``refs``) is one of ``targets`` (ascending), in the order of ``ats``. */
static PyObject *referring(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer targets_b, ats_b, refs_b;
    if (!PyArg_ParseTuple(args, "y*y*y*", &targets_b, &ats_b, &refs_b))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ats_b.len / 8, targets = targets_b.len / 8;
    Buf got = {0};
    int ok = 0;
    if (refs_b.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "as many references as DIEs");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = ((const int64_t *)refs_b.buf)[i];
        if (r >= 0 && find(targets_b.buf, targets, (uint64_t)r) >= 0)
            PUT(&got, ((const uint64_t *)ats_b.buf)[i]);
    }
    ok = 1;
fail:
    out = answer(ok, &got);
done:
    free(got.p);
    PyBuffer_Release(&targets_b);
    PyBuffer_Release(&ats_b);
    PyBuffer_Release(&refs_b);
    return out;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "One unit's kept DIEs (tree.Tree._walk_unit), or None."},
    {"origins", origins, METH_VARARGS, "The DIE each inlined copy's origin leads to."},
    {"group", group, METH_VARARGS, "Copies by the DIE each one's origin leads to."},
    {"fold", fold, METH_VARARGS, "Pairs appended to a dict of lists."},
    {"refers", refers, METH_VARARGS, "The kept DIEs that refer to another."},
    {"referring", referring, METH_VARARGS, "The DIEs that refer to one of some."},
    {"codes", codes, METH_VARARGS, "The name code of each kept DIE."},
    {"qualify", qualify, METH_VARARGS, "The qualified name of each DIE (Tree.names_of)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "tree.Tree._walk_unit in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__walk(void)
{
    return PyModule_Create(&module);
}
