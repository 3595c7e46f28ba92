/* SPDX-License-Identifier: MIT
 *
 * errand_error_from_http: liberrand's face of core's response classifier
 * (src/core/http_outcome.h), which liberrand compiles in (CMakeLists.txt,
 * er_http_outcome_obj), so dispatch and applications share one table.
 */
#include "errand/errand.h"
#include "core/http_outcome.h"

_Static_assert(ERRAND_CLASS_SUCCESS == (int)ER_HTTP_SUCCESS &&
                   ERRAND_CLASS_TRANSIENT == (int)ER_HTTP_TRANSIENT &&
                   ERRAND_CLASS_PERMANENT == (int)ER_HTTP_PERMANENT &&
                   ERRAND_CLASS_RETRY_LATER == (int)ER_HTTP_RETRY_LATER &&
                   ERRAND_CLASS_THROTTLED == (int)ER_HTTP_THROTTLED,
               "liberrand's classes are core's");
_Static_assert(ERRAND_HTTP_DELAY_MAX_MS == ER_HTTP_DELAY_MAX_MS, "one cap");

ERRAND_API int errand_error_from_http(long status, const char *retry_after, long long now_ms,
                                      int *cls, long long *delay_ms)
{
    if (!cls || !delay_ms)
        return ERRAND_EINVAL;
    int64_t d = 0;
    *cls = (int)er_http_classify(status, retry_after, now_ms, ER_HTTP_DELAY_MAX_MS, &d);
    *delay_ms = d;
    return 0;
}
