/* SPDX-License-Identifier: MIT
 *
 * The adaptive prefetch rule of the worker runtime (docs/workers.md,
 * "Prefetch"): how many jobs to lease ahead of free handler threads, from
 * the measured handler run time, fetch round trip and the lease. Pure: the
 * measurements are arguments; it reads no clock and holds no state. The
 * worker (worker_fetch.c, worker_job.c) is its only caller; a fixed
 * prefetch setting bypasses it. Not installed.
 */
#ifndef ER_CLIENT_PREFETCH_H
#define ER_CLIENT_PREFETCH_H

#define ER_PREFETCH_MAX 10000 /* the bound of any prefetch, fixed or adaptive */
/* Jobs to keep ready: this many fetch round trips of work, for a round trip
 * that comes late or a burst of short jobs. */
#define ER_PREFETCH_TRIPS 2
/* A prefetched job starts within this fraction of the lease (1/4), well
 * before the lease/3 at which it would need its first heartbeat. */
#define ER_PREFETCH_WAIT_DIV 4

typedef struct er_prefetch_in {
    int concurrency; /* handler threads, >= 1 */
    double run_us;   /* recent handler run time (EWMA), µs; < 0: not measured yet */
    double rtt_us;   /* recent fetch round trip (EWMA), µs; < 0: not measured yet */
    long lease_ms;   /* the lease each fetch asks for */
} er_prefetch_in;

/* The prefetch for these measurements, 0..ER_PREFETCH_MAX: enough jobs to
 * keep every handler busy for ER_PREFETCH_TRIPS round trips, and no more
 * than the handlers surely start within lease/ER_PREFETCH_WAIT_DIV (n
 * queued jobs wait up to ceil(n / concurrency) runs). 0 until both the run
 * time and the round trip are measured. */
int er_prefetch_size(const er_prefetch_in *in);

/* The next value of an average: the first sample (avg < 0) as it is, then
 * 1/8 of each new sample. */
double er_prefetch_ewma(double avg, double sample);

#endif
