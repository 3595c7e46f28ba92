/* SPDX-License-Identifier: MIT
 *
 * Unit tests for core/trace.h: the traceparent rule, the trace of each kind
 * of trace_id, span ids and the traceparent HTTP dispatch sends.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/trace.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define PARENT "00f067aa0ba902b7"

Test(trace, traceparent_shape)
{
    cr_assert(er_traceparent_ok("00-" TRACE "-" PARENT "-01"));
    cr_assert(er_traceparent_ok("00-" TRACE "-" PARENT "-00"));
    cr_assert_not(er_traceparent_ok("01-" TRACE "-" PARENT "-01"), "version 00 only");
    cr_assert_not(er_traceparent_ok("00-00000000000000000000000000000000-" PARENT "-01"));
    cr_assert_not(er_traceparent_ok("00-" TRACE "-0000000000000000-01"));
    cr_assert_not(er_traceparent_ok("00-4BF92F3577B34DA6A3CE929D0E0E4736-" PARENT "-01"),
                  "the header is lowercase");
    cr_assert_not(er_traceparent_ok("00-" TRACE "-" PARENT "-01-extra"));
    cr_assert_not(er_traceparent_ok("00-" TRACE "-" PARENT "-0g"));
    cr_assert_not(er_traceparent_ok(""));
    cr_assert_not(er_traceparent_ok(NULL));
}

Test(trace, trace_of_each_kind_of_trace_id)
{
    char t[33], p[17];
    cr_assert(er_trace_of("00-" TRACE "-" PARENT "-01", t, p));
    cr_assert_str_eq(t, TRACE);
    cr_assert_str_eq(p, PARENT);
    cr_assert(er_trace_of("4BF92F3577B34DA6A3CE929D0E0E4736", t, p));
    cr_assert_str_eq(t, TRACE);
    cr_assert_str_eq(p, "");
    cr_assert_not(er_trace_of("order-42", t, p));
    char t2[33];
    cr_assert_not(er_trace_of("order-42", t2, p));
    cr_assert_str_eq(t, t2, "the same id hashes to the same trace");
    cr_assert_eq(strlen(t), 32);
    cr_assert_not(er_trace_of("order-43", t2, p));
    cr_assert_str_neq(t, t2);
}

Test(trace, span_ids_and_the_dispatch_header)
{
    char a[17], b[17], c[17];
    er_trace_span_id("job-1", 1, a);
    er_trace_span_id("job-1", 2, b);
    er_trace_span_id("job-2", 1, c);
    cr_assert_eq(strlen(a), 16);
    cr_assert_str_neq(a, b);
    cr_assert_str_neq(a, c);
    char h[64];
    cr_assert(er_trace_header("00-" TRACE "-" PARENT "-00", "job-1", 1, h));
    char want[64];
    snprintf(want, sizeof want, "00-%s-%s-00", TRACE, a);
    cr_assert_str_eq(h, want, "the parent is the attempt's span, the flags kept");
    cr_assert(er_trace_header(TRACE, "job-1", 2, h));
    snprintf(want, sizeof want, "00-%s-%s-01", TRACE, b);
    cr_assert_str_eq(h, want);
    cr_assert_not(er_trace_header("order-42", "job-1", 1, h), "a hashed trace is not sent");
    cr_assert_not(er_trace_header(NULL, "job-1", 1, h));
}
