/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's pending-ack queue (ackq.h): one text buffer and an
 * array of item ends, so an outcome costs no json_pack or json_dumps on
 * the worker's hot path. A failed call leaves the queue's items as they
 * were.
 */
#include "client/ackq.h"

#include "errand/errand.h"

#include <stdlib.h>
#include <string.h>

/* ---- pending ack items -------------------------------------------------------- */

void er_ackq_fini(er_ackq *q)
{
    if (!q)
        return;
    free(q->buf);
    free(q->ends);
    memset(q, 0, sizeof *q);
}

int er_ackq_push(er_ackq *q, const char *item, size_t len)
{
    if (len >= ER_ACKQ_MAX_BYTES - q->len ||
        ER_GROW(&q->ends, &q->ncap, q->n + 1, ER_ACKQ_MAX_ITEMS) < 0 ||
        ER_GROW(&q->buf, &q->cap, q->len + len + 1, ER_ACKQ_MAX_BYTES) < 0)
        return ERRAND_ENOMEM;
    memcpy(q->buf + q->len, item, len);
    q->len += len;
    q->buf[q->len++] = ',';
    q->ends[q->n++] = q->len;
    return 0;
}

int er_ackq_take(er_ackq *q, size_t max, er_ackq *out)
{
    if (q->n <= max) {
        *out = *q;
        memset(q, 0, sizeof *q);
        return 0;
    }
    er_ackq part = {0};
    size_t cut = q->ends[max - 1];
    for (size_t i = 0; i < max; i++) {
        size_t len;
        const char *it = er_ackq_item(q, i, &len);
        if (er_ackq_push(&part, it, len) < 0) {
            er_ackq_fini(&part);
            return ERRAND_ENOMEM;
        }
    }
    memmove(q->buf, q->buf + cut, q->len - cut);
    q->len -= cut;
    for (size_t i = max; i < q->n; i++)
        q->ends[i - max] = q->ends[i] - cut;
    q->n -= max;
    *out = part;
    return 0;
}

int er_ackq_prepend(er_ackq *q, er_ackq *front)
{
    /* Room first, so a failure changes nothing. */
    size_t n = front->n + q->n, len = front->len + q->len;
    if (ER_GROW(&front->ends, &front->ncap, n, ER_ACKQ_MAX_ITEMS) < 0 ||
        ER_GROW(&front->buf, &front->cap, len, ER_ACKQ_MAX_BYTES) < 0)
        return ERRAND_ENOMEM;
    if (q->len)
        memcpy(front->buf + front->len, q->buf, q->len);
    for (size_t i = 0; i < q->n; i++)
        front->ends[front->n + i] = q->ends[i] + front->len;
    front->n = n;
    front->len = len;
    er_ackq_fini(q);
    *q = *front;
    memset(front, 0, sizeof *front);
    return 0;
}

const char *er_ackq_item(const er_ackq *q, size_t i, size_t *len)
{
    size_t start = i ? q->ends[i - 1] : 0;
    *len = q->ends[i] - start - 1;
    return q->buf + start;
}

int er_ackq_write(const er_ackq *q, er_buf *b)
{
    er_buf_add(b, "[", 1);
    if (q->len)
        er_buf_add(b, q->buf, q->len - 1);
    return er_buf_add(b, "]", 1);
}
