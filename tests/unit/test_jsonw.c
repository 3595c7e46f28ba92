/* SPDX-License-Identifier: MIT
 *
 * The JSON writer: commas and nesting, escaping, numbers, the size cap;
 * and the one string escaper's UTF-8 policy (invalid sequences become
 * U+FFFD). Each output is parsed back with jansson so "valid JSON" is
 * checked by a real parser.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/jsonw.h"

static json_t *parse(const er_jsonw *w)
{
    cr_assert(!w->failed);
    json_error_t e;
    json_t *v = json_loadb(w->out.data, w->out.len, JSON_DECODE_ANY, &e);
    cr_assert_not_null(v, "not JSON: %s (%s)", w->out.data, e.text);
    return v;
}

Test(jsonw, nested_objects_and_arrays_get_commas_in_the_right_places)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "a");
    er_jsonw_int(&w, 1);
    er_jsonw_key(&w, "list");
    er_jsonw_begin_array(&w);
    er_jsonw_int(&w, 1);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "x");
    er_jsonw_null(&w);
    er_jsonw_end_object(&w);
    er_jsonw_str(&w, "s");
    er_jsonw_end_array(&w);
    er_jsonw_key(&w, "b");
    er_jsonw_bool(&w, true);
    er_jsonw_end_object(&w);
    cr_assert_str_eq(w.out.data, "{\"a\":1,\"list\":[1,{\"x\":null},\"s\"],\"b\":true}");
    json_decref(parse(&w));
    er_jsonw_fini(&w);
}

Test(jsonw, strings_are_escaped_and_round_trip)
{
    const char *s = "quote\" back\\ nl\n tab\t ctl\x01 utf8 \xc3\xa9";
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_array(&w);
    er_jsonw_str(&w, s);
    er_jsonw_str(&w, NULL);
    er_jsonw_end_array(&w);
    json_t *v = parse(&w);
    cr_assert_str_eq(json_string_value(json_array_get(v, 0)), s);
    cr_assert(json_is_null(json_array_get(v, 1)));
    json_decref(v);
    er_jsonw_fini(&w);
}

Test(jsonw, doubles_stay_reals_and_times_are_rfc3339_or_null)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_array(&w);
    er_jsonw_double(&w, 1.0);
    er_jsonw_double(&w, 0.5);
    er_jsonw_time(&w, 0);
    er_jsonw_time(&w, 1796004000000LL);
    er_jsonw_raw(&w, "{\"k\":[1,2]}", 11);
    er_jsonw_end_array(&w);
    json_t *v = parse(&w);
    cr_assert(json_is_real(json_array_get(v, 0)));
    cr_assert_float_eq(json_real_value(json_array_get(v, 1)), 0.5, 1e-12);
    cr_assert(json_is_null(json_array_get(v, 2)));
    cr_assert_str_eq(json_string_value(json_array_get(v, 3)), "2026-11-30T02:00:00.000Z");
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(json_array_get(v, 4), "k"), 1)), 2);
    json_decref(v);
    er_jsonw_fini(&w);
}

Test(jsonw, output_past_the_cap_fails_instead_of_growing)
{
    er_jsonw w;
    er_jsonw_init(&w, 64);
    er_jsonw_begin_array(&w);
    for (int i = 0; i < 100; i++)
        er_jsonw_str(&w, "0123456789");
    er_jsonw_end_array(&w);
    cr_assert(w.failed);
    cr_assert_leq(w.out.cap, 65);
    er_jsonw_fini(&w);
}

Test(jsonw, integers_cover_the_whole_int64_range)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_array(&w);
    er_jsonw_int(&w, 0);
    er_jsonw_int(&w, -7);
    er_jsonw_int(&w, INT64_MAX);
    er_jsonw_int(&w, INT64_MIN);
    er_jsonw_end_array(&w);
    cr_assert_str_eq(w.out.data, "[0,-7,9223372036854775807,-9223372036854775808]");
    er_jsonw_fini(&w);
}

Test(jsonw, preformatted_members_join_the_object)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "msg");
    er_jsonw_str(&w, "hi");
    er_jsonw_members(&w, "\"queue\":\"q\",\"attempt\":2");
    er_jsonw_members(&w, NULL);
    er_jsonw_end_object(&w);
    cr_assert_str_eq(w.out.data, "{\"msg\":\"hi\",\"queue\":\"q\",\"attempt\":2}");
    er_jsonw_fini(&w);
}

/* er_jsonw_time formats without gmtime_r; it must give er_time_format's text
 * for every instant, leap days and year ends included. */
Test(jsonw, times_match_er_time_format_everywhere)
{
    static const int64_t fixed[] = {
        1,                      /* 1970-01-01T00:00:00.001Z */
        951782400000LL,         /* 2000-02-29 */
        951868799999LL,         /* 2000-02-29T23:59:59.999Z */
        4107456000000LL,        /* 2100-02-28 */
        4107542400000LL,        /* 2100-03-01 (not a leap year) */
        253402300799999LL,      /* 9999-12-31T23:59:59.999Z */
        253402300800000LL,      /* 10000-01-01: clamped like er_time_format */
        -1,                     /* before the epoch */
        -86400001LL,
    };
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        int64_t ms;
        if (i < (int)(sizeof fixed / sizeof fixed[0])) {
            ms = fixed[i];
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ms = (int64_t)(x % 253402300800000ULL) + 1;
        }
        char want[40];
        er_time_format(ms, want + 1);
        want[0] = '"';
        size_t n = strlen(want);
        want[n] = '"';
        want[n + 1] = '\0';
        er_jsonw w;
        er_jsonw_init(&w, 4096);
        er_jsonw_time(&w, ms);
        cr_assert_str_eq(w.out.data, want, "ms=%lld", (long long)ms);
        er_jsonw_fini(&w);
    }
}

Test(jsonw, every_control_byte_gets_its_escape)
{
    char in[40];
    for (int i = 0; i < 31; i++)
        in[i] = (char)(i + 1);
    in[31] = '"';
    in[32] = '\\';
    in[33] = 0x7f;
    in[34] = '\0';
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, in);
    er_jsonw_str(&w, in);
    er_jsonw_key(&w, "plain");
    er_jsonw_str(&w, "");
    er_jsonw_end_object(&w);
    json_t *v = parse(&w);
    cr_assert_str_eq(json_string_value(json_object_get(v, in)), in);
    cr_assert_str_eq(json_string_value(json_object_get(v, "plain")), "");
    cr_assert_not_null(strstr(w.out.data, "\\u0001\\u0002"));
    cr_assert_not_null(strstr(w.out.data, "\\n\\u000b\\u000c\\r"));
    json_decref(v);
    er_jsonw_fini(&w);
}

Test(jsonw, repeated_doubles_print_the_same_text)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_array(&w);
    er_jsonw_double(&w, 0.2);
    er_jsonw_double(&w, 0.2);
    er_jsonw_double(&w, 3.0);
    er_jsonw_double(&w, 0.2);
    er_jsonw_double(&w, -0.0);
    er_jsonw_end_array(&w);
    cr_assert_str_eq(w.out.data, "[0.20000000000000001,0.20000000000000001,3.0,0.20000000000000001,-0.0]");
    er_jsonw_fini(&w);
}

/* One member through the pre-made key and through er_jsonw_key + value, as
 * the first member and as a later one: same bytes. */
#define SAME_MEMBER(KCALL, VCALL)                                                       \
    do {                                                                                \
        er_jsonw a, b;                                                                  \
        er_jsonw_init(&a, 4096);                                                        \
        er_jsonw_init(&b, 4096);                                                        \
        er_jsonw_begin_object(&a);                                                      \
        er_jsonw_begin_object(&b);                                                      \
        for (int rep = 0; rep < 2; rep++) {                                             \
            er_jsonw_key(&a, "k");                                                      \
            VCALL(&a);                                                                  \
            KCALL(&b);                                                                  \
        }                                                                               \
        er_jsonw_end_object(&a);                                                        \
        er_jsonw_end_object(&b);                                                        \
        cr_assert_str_eq(b.out.data, a.out.data);                                                 \
        json_decref(parse(&b));                                                         \
        er_jsonw_fini(&a);                                                              \
        er_jsonw_fini(&b);                                                              \
    } while (0)

static const char *kv_str;
static int64_t kv_int;
static double kv_double;
static const char *kv_raw;

static void k_str(er_jsonw *w) { er_jsonw_kstr(w, ER_JSONW_K("k"), kv_str); }
static void v_str(er_jsonw *w) { er_jsonw_str(w, kv_str); }
static void k_int(er_jsonw *w) { er_jsonw_kint(w, ER_JSONW_K("k"), kv_int); }
static void v_int(er_jsonw *w) { er_jsonw_int(w, kv_int); }
static void k_time(er_jsonw *w) { er_jsonw_ktime(w, ER_JSONW_K("k"), kv_int); }
static void v_time(er_jsonw *w) { er_jsonw_time(w, kv_int); }
static void k_double(er_jsonw *w) { er_jsonw_kdouble(w, ER_JSONW_K("k"), kv_double); }
static void v_double(er_jsonw *w) { er_jsonw_double(w, kv_double); }
static void k_raw(er_jsonw *w)
{
    er_jsonw_kraw(w, ER_JSONW_K("k"), kv_raw, kv_raw ? strlen(kv_raw) : 0);
}
static void v_raw(er_jsonw *w) { er_jsonw_raw(w, kv_raw, kv_raw ? strlen(kv_raw) : 0); }
static void k_obj(er_jsonw *w)
{
    er_jsonw_kbegin_object(w, ER_JSONW_K("k"));
    er_jsonw_kint(w, ER_JSONW_K("x"), 1);
    er_jsonw_kstr(w, ER_JSONW_K("y"), NULL);
    er_jsonw_end_object(w);
}
static void v_obj(er_jsonw *w)
{
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "x");
    er_jsonw_int(w, 1);
    er_jsonw_key(w, "y");
    er_jsonw_null(w);
    er_jsonw_end_object(w);
}

Test(jsonw, premade_keys_write_the_same_bytes_as_key_and_value)
{
    const char *strs[] = {NULL, "", "plain", "q\"b\\ nl\n ctl\x01\x1f", "\xc3\xa9"};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        kv_str = strs[i];
        SAME_MEMBER(k_str, v_str);
    }
    const int64_t ints[] = {0, 1, -1, 1000, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        kv_int = ints[i];
        SAME_MEMBER(k_int, v_int);
    }
    const int64_t times[] = {0, 1, -1, 1796004000123LL, 253402300799999LL, 253402300800000LL};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        kv_int = times[i];
        SAME_MEMBER(k_time, v_time);
    }
    const double dbls[] = {0.5, 1.0, 0.1, -3e300};
    for (size_t i = 0; i < sizeof dbls / sizeof dbls[0]; i++) {
        kv_double = dbls[i];
        SAME_MEMBER(k_double, v_double);
    }
    const char *raws[] = {NULL, "{\"a\":[1]}", "\"s\"", "12"};
    for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++) {
        kv_raw = raws[i];
        SAME_MEMBER(k_raw, v_raw);
    }
    SAME_MEMBER(k_obj, v_obj);
}

Test(jsonw, premade_keys_respect_the_cap)
{
    er_jsonw w;
    er_jsonw_init(&w, 12);
    er_jsonw_begin_object(&w);
    er_jsonw_kint(&w, ER_JSONW_K("a"), 1);  /* {"a":1 */
    cr_assert(!w.failed);
    er_jsonw_kstr(&w, ER_JSONW_K("b"), "xy"); /* ,"b":"xy" passes 12 */
    cr_assert(w.failed);
    er_jsonw_kint(&w, ER_JSONW_K("c"), 2);
    cr_assert(w.failed);
    er_jsonw_fini(&w);
}

/* ---- the escaper's UTF-8 policy (er_json_str) ---- */

#define FFFD "\xef\xbf\xbd"

/* er_json_str(in) is valid JSON that jansson (default flags) reads back
 * as want; the writer's str, key and kstr paths agree byte for byte. */
static void escapes_to(const char *in, const char *want)
{
    er_buf b;
    er_buf_init(&b, 4096);
    cr_assert_eq(er_json_str(&b, in), 0);
    json_error_t e;
    json_t *v = json_loadb(b.data, b.len, JSON_DECODE_ANY, &e);
    cr_assert_not_null(v, "not JSON: %s (%s)", b.data, e.text);
    cr_assert_str_eq(json_string_value(v), want, "escaping %s", b.data);
    json_decref(v);

    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, in);
    er_jsonw_str(&w, in);
    er_jsonw_kstr(&w, ER_JSONW_K("k"), in);
    er_jsonw_end_object(&w);
    cr_assert(!w.failed);
    er_buf want_obj;
    er_buf_init(&want_obj, 8192);
    er_buf_adds(&want_obj, "{");
    er_buf_adds(&want_obj, b.data);
    er_buf_adds(&want_obj, ":");
    er_buf_adds(&want_obj, b.data);
    er_buf_adds(&want_obj, ",\"k\":");
    er_buf_adds(&want_obj, b.data);
    er_buf_adds(&want_obj, "}");
    cr_assert_str_eq(w.out.data, want_obj.data);
    er_buf_fini(&want_obj);
    er_jsonw_fini(&w);
    er_buf_fini(&b);
}

Test(escape, well_formed_utf8_is_copied)
{
    escapes_to("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    escapes_to("\xc2\x80\xdf\xbf", "\xc2\x80\xdf\xbf");             /* U+0080, U+07FF */
    escapes_to("\xe0\xa0\x80\xef\xbf\xbf", "\xe0\xa0\x80\xef\xbf\xbf"); /* U+0800, U+FFFF */
    escapes_to("\xed\x9f\xbf\xee\x80\x80", "\xed\x9f\xbf\xee\x80\x80"); /* around the surrogates */
    escapes_to("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf");
    escapes_to(FFFD, FFFD);
}

Test(escape, bytes_that_never_start_a_sequence_become_one_fffd_each)
{
    escapes_to("a\x80z", "a" FFFD "z");
    escapes_to("\xbf\xff\xfe", FFFD FFFD FFFD);
    escapes_to("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD); /* F5 would be past U+10FFFF */
}

Test(escape, overlong_forms_are_replaced)
{
    escapes_to("\xc0\x80", FFFD FFFD);             /* NUL in two bytes */
    escapes_to("\xc1\xbf", FFFD FFFD);             /* U+007F in two bytes */
    escapes_to("\xe0\x80\xaf", FFFD FFFD FFFD);    /* '/' in three */
    escapes_to("\xe0\x9f\xbf", FFFD FFFD FFFD);    /* U+07FF in three */
    escapes_to("\xf0\x8f\xbf\xbf", FFFD FFFD FFFD FFFD); /* U+FFFF in four */
}

Test(escape, encoded_surrogates_and_past_10ffff_are_replaced)
{
    escapes_to("\xed\xa0\x80", FFFD FFFD FFFD);  /* U+D800 */
    escapes_to("\xed\xbf\xbf", FFFD FFFD FFFD);  /* U+DFFF */
    escapes_to("\xed\xa0\xbd\xed\xb8\x80", FFFD FFFD FFFD FFFD FFFD FFFD); /* CESU-8 pair */
    escapes_to("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD); /* U+110000 */
}

Test(escape, a_truncated_sequence_is_one_fffd)
{
    escapes_to("\xc3", FFFD);
    escapes_to("\xe2\x82", FFFD);
    escapes_to("\xf0\x9f\x98", FFFD);
    escapes_to("\xe2\x82x", FFFD "x");              /* cut by an ASCII byte */
    escapes_to("\xf0\x9f\xc3\xa9", FFFD "\xc3\xa9"); /* cut by the next character */
    escapes_to("ok \xe2\x82\xac\xe2\x82", "ok \xe2\x82\xac" FFFD);
}

Test(escape, control_characters_and_quotes)
{
    escapes_to("\"\\/\n\r\t\b\f\x01\x1f\x7f", "\"\\/\n\r\t\b\f\x01\x1f\x7f");
    er_buf b;
    er_buf_init(&b, 4096);
    cr_assert_eq(er_json_str(&b, "\"\\\n\r\t\b\f\x01\x1f\x7f"), 0);
    cr_assert_str_eq(b.data, "\"\\\"\\\\\\n\\r\\t\\u0008\\u000c\\u0001\\u001f\x7f\"");
    er_buf_fini(&b);
    escapes_to("bad \x01\xff mixed \"\xe2\x82\"", "bad \x01" FFFD " mixed \"" FFFD "\"");
}

Test(escape, a_nul_ends_the_string)
{
    er_buf b;
    er_buf_init(&b, 64);
    cr_assert_eq(er_json_str(&b, "a\0b"), 0);
    cr_assert_str_eq(b.data, "\"a\"");
    er_buf_reset(&b);
    cr_assert_eq(er_json_str(&b, ""), 0);
    cr_assert_str_eq(b.data, "\"\"");
    er_buf_fini(&b);
}

Test(escape, past_the_limit_nothing_is_written)
{
    er_buf b;
    er_buf_init(&b, 16);
    er_buf_adds(&b, "[");
    cr_assert_eq(er_json_str(&b, "ab"), 0);
    cr_assert_eq(er_json_str(&b, "\x01\x02\x03"), ER_ETOOBIG); /* 20 bytes escaped */
    cr_assert_str_eq(b.data, "[\"ab\"", "no half string");
    cr_assert_eq(b.len, 5);
    cr_assert_eq(er_json_str(&b, "c"), ER_ETOOBIG, "the failure is remembered");
    er_buf_fini(&b);
}

Test(escape, the_writer_replaces_in_keys_and_values)
{
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "k\xff");
    er_jsonw_str(&w, "v\xed\xa0\x80");
    er_jsonw_end_object(&w);
    json_t *v = parse(&w);
    cr_assert_str_eq(json_string_value(json_object_get(v, "k" FFFD)), "v" FFFD FFFD FFFD);
    json_decref(v);
    er_jsonw_fini(&w);
}
