/* A strict JSON scanner for nvct's native programs: it finds what they need in an OCI state
 * or config.json without a parser library. Anything it does not accept (malformed JSON, a
 * duplicate member, an escape it cannot decode, nesting deeper than MAX_DEPTH) is reported,
 * and the program hands the input to its Python half instead of guessing.
 *
 * Included by hook.c and cdihook.c after client.h.
 */
#define MAX_DEPTH 64

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Append code point `cp` as UTF-8 to `out` (`*n` used of `cap`, one kept for the NUL). */
static int put_utf8(char *out, size_t cap, size_t *n, unsigned long cp)
{
    char enc[4];
    size_t k = cp < 0x80      ? (enc[0] = (char)cp, 1)
               : cp < 0x800   ? (enc[0] = (char)(0xC0 | cp >> 6), 2)
               : cp < 0x10000 ? (enc[0] = (char)(0xE0 | cp >> 12), 3)
                              : (enc[0] = (char)(0xF0 | cp >> 18), 4);
    for (size_t i = 1; i < k; i++)
        enc[i] = (char)(0x80 | ((cp >> (6 * (k - 1 - i))) & 0x3F));
    if (!out)
        return 0;
    if (*n + k >= cap)
        return -1;
    memcpy(out + *n, enc, k);
    *n += k;
    return 0;
}

/* The JSON string at `p` (its opening quote), decoded into `out` (NUL-terminated) unless
 * `out` is NULL; the position after it, or NULL when it is malformed, too long for `cap`, or
 * holds an escaped NUL (which no path can hold). */
static const char *json_string(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        unsigned long cp = c;
        if (c == '"') {
            if (out)
                out[n] = '\0';
            return p + 1;
        }
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            if (++p >= end)
                return NULL;
            unsigned u, low;
            switch (*p) {
            case '"': case '\\': case '/': cp = (unsigned char)*p; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (hex4(p + 1, end, &u) < 0)
                    return NULL;
                p += 4;
                cp = u;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a surrogate pair, or nothing */
                    if (end - p < 7 || p[1] != '\\' || p[2] != 'u' ||
                        hex4(p + 3, end, &low) < 0 || low < 0xDC00 || low > 0xDFFF)
                        return NULL;
                    p += 6;
                    cp = 0x10000 + ((unsigned long)(u - 0xD800) << 10) + (low - 0xDC00);
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return NULL;
                }
                break;
            default:
                return NULL;
            }
            if (cp == 0 || put_utf8(out, cap, &n, cp) < 0)
                return NULL;
            continue;
        }
        if (out) {
            if (n + 1 >= cap)
                return NULL;
            out[n++] = (char)c;
        }
    }
    return NULL;
}

static const char *digits(const char *p, const char *end)
{
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p > start ? p : NULL;
}

/* Past the JSON number at `p` (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or NULL. */
static const char *json_number(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (!(p = digits(p, end)))
        return NULL;
    if (p < end && *p == '.' && !(p = digits(p + 1, end)))
        return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!(p = digits(p, end)))
            return NULL;
    }
    return p;
}

/* Past the JSON value at `p`; NULL when it is malformed or nested deeper than MAX_DEPTH. */
static const char *json_skip(const char *p, const char *end, int depth)
{
    p = ws(p, end);
    if (p >= end || depth > MAX_DEPTH)
        return NULL;
    if (*p == '"')
        return json_string(p, end, NULL, 0);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_string(ws(p, end), end, NULL, 0);
                if (!p)
                    return NULL;
                p = ws(p, end);
                if (p >= end || *p++ != ':')
                    return NULL;
            }
            p = json_skip(p, end, depth + 1);
            if (!p)
                return NULL;
            p = ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    static const char *const literals[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(literals[i]);
        if ((size_t)(end - p) >= n && memcmp(p, literals[i], n) == 0)
            return p + n;
    }
    return json_number(p, end);
}

/* The members `keys` (NULL-terminated, each shorter than 64 bytes) of the JSON object at
 * `p`: `values[i]` is where the value of `keys[i]` starts, NULL when the object has no such
 * member. Returns the position after the object, or NULL when it is malformed or names one
 * of `keys` twice. */
static const char *json_members(const char *p, const char *end, const char *const keys[],
                                const char *values[])
{
    int n = 0;
    while (keys[n])
        values[n++] = NULL;
    p = ws(p, end);
    if (p >= end || *p++ != '{')
        return NULL;
    p = ws(p, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        char key[64];
        int which = -1;
        const char *after = json_string(ws(p, end), end, key, sizeof key);
        if (after) {
            for (int i = 0; i < n && which < 0; i++)
                if (strcmp(key, keys[i]) == 0)
                    which = i;
        } else if (!(after = json_string(ws(p, end), end, NULL, 0))) {
            return NULL; /* not a string: a longer key was what did not fit */
        }
        p = ws(after, end);
        if (p >= end || *p++ != ':')
            return NULL;
        p = ws(p, end);
        if (which >= 0) {
            if (values[which])
                return NULL;
            values[which] = p;
        }
        if (!(p = json_skip(p, end, 0)))
            return NULL;
        p = ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}
