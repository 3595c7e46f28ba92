'use strict';
// SPDX-License-Identifier: MIT
//
// The Faktory frontend measured with the Node client users run (faktory-worker,
// pinned in tests/faktory) and the peers' own method and knobs (BENCH_N,
// BENCH_ENQ_CONC, BENCH_BULK, BENCH_PROC_CONCS, BENCH_LAT_*: the peers'
// lib/common.js, read from ../shared/bench/peers or $BENCH_PEERS), so its rows
// sit beside BullMQ's. Prints one JSON line a phase.
// Usage: node faktory-node.js <label> <serverPid> [tcp://:password@host:port]
// BENCH_PHASES (default enqueue_single,enqueue_bulk,process,latency) picks phases;
// against stub-server.js leave out latency (the stub hands out jobs nobody pushed).
// BENCH_FK_WORKERS=W runs the processing with W Workers of concurrency c/W each
// (a Worker fetches one job at a time; W of them fetch side by side).
// BENCH_FK_TIMES=1 adds the client's round trips to the push and process
// lines: each PUSH, FETCH and ACK from the call to its answer, as the
// client's event loop sees them (p50/p90/p99/mean in µs); and, against
// errand, its threads' CPU a job (loop, writer, the rest, µs) and, with
// ERRAND_METRICS_URL (its /metrics), its commits a job and requests a commit.
const fs = require('fs');
const path = require('path');

const REPO = path.resolve(__dirname, '..', '..');
const PEERS = process.env.BENCH_PEERS || path.resolve(REPO, '..', 'shared', 'bench', 'peers');
const C = require(path.join(PEERS, 'lib', 'common'));
const { Client, Worker } = require(path.join(REPO, 'tests', 'faktory', 'node_modules', 'faktory-worker'));

const label = process.argv[2] || 'errand-faktory';
const serverPid = Number(process.argv[3] || 0);
const url = process.argv[4] || process.env.FAKTORY_URL || 'tcp://127.0.0.1:7419';
const WORKERS = Number(process.env.BENCH_FK_WORKERS || 1);
const phases = new Set((process.env.BENCH_PHASES || 'enqueue_single,enqueue_bulk,process,latency').split(','));
const out = (phase, extra) => C.emit({ system: label, phase, ...extra });
let qseq = 0;
const newQueue = (p) => `bench-${process.pid}-${p}-${qseq++}`;
// BENCH_FK_JIDS=seq: jids in push order, as the C client sends them (a
// diagnostic of what the client's random jids cost the store's id index);
// by default the client makes them (uuid v4).
const SEQ_JIDS = process.env.BENCH_FK_JIDS === 'seq';
const TIMES = process.env.BENCH_FK_TIMES === '1';
// Round trips of one kind, in µs; stats(name) sums them up and starts over.
// A call counts in the period it started in: a stopped Worker's last FETCH,
// answered (empty) 2 s later, is not the next phase's.
function roundTrips() {
  let us = []; let period = 0;
  const timed = (fn) => (TIMES ? async (...a) => {
    const t = process.hrtime.bigint(); const p = period;
    const r = await fn(...a);
    if (p === period) us.push(Number(process.hrtime.bigint() - t) / 1000);
    return r;
  } : fn);
  const stats = (name) => {
    const got = us; us = []; period++;
    if (!TIMES || !got.length) return {};
    const s = Float64Array.from(got).sort();
    const at = (p) => Math.round(s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]);
    const mean = Math.round(s.reduce((x, y) => x + y, 0) / s.length);
    return { [`${name}_us`]: { p50: at(0.5), p90: at(0.9), p99: at(0.99), mean } };
  };
  return { timed, stats };
}
const CLK_TCK = Number(require('child_process').execSync('getconf CLK_TCK')) || 100;
// CPU a job of the server's threads by name: errand's loop thread is named
// "errand", its writer "errand-writer"; the rest are summed.
function threadMeter(pid) {
  const read = () => {
    const by = { loop: 0, writer: 0, other: 0 };
    let dirs;
    try { dirs = fs.readdirSync(`/proc/${pid}/task`); } catch (e) { return null; }
    for (const t of dirs) {
      try {
        const comm = fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim();
        const st = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
        const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
        const ticks = Number(f[11]) + Number(f[12]);
        by[comm === 'errand' ? 'loop' : comm === 'errand-writer' ? 'writer' : 'other'] += ticks;
      } catch (e) { /* a thread that ended */ }
    }
    return by;
  };
  const a = TIMES ? read() : null;
  if (a && !a.loop) return () => ({}); // not errand (the stub)
  return (jobs) => {
    const b = a && read();
    if (!b || !jobs) return {};
    const us = (k) => Math.round(((b[k] - a[k]) / CLK_TCK) * 1e6 / jobs);
    return { server_thread_us_per_job: { loop: us('loop'), writer: us('writer'), other: us('other') } };
  };
}
// Commits a job and requests a commit, from errand's /metrics.
const METRICS = process.env.ERRAND_METRICS_URL;
async function commitMeter() {
  const read = async () => {
    try {
      const t = await (await fetch(METRICS)).text();
      const v = (n) => Number(new RegExp(`^errand_store_commit_batch_size_${n} (\\S+)$`, 'm').exec(t)[1]);
      return { sum: v('sum'), count: v('count') };
    } catch (e) { return null; }
  };
  const a = TIMES && METRICS ? await read() : null;
  return async (jobs) => {
    const b = a && await read();
    if (!b || !jobs || b.count === a.count) return {};
    const commits = b.count - a.count;
    return { commits_per_job: +(commits / jobs).toFixed(3), requests_per_commit: +((b.sum - a.sum) / commits).toFixed(2) };
  };
}
const pushTimes = roundTrips(); const fetchTimes = roundTrips(); const ackTimes = roundTrips();
const job = (q, i) => ({ ...(SEQ_JIDS ? { jid: `${q}-${String(i).padStart(9, '0')}` } : {}),
  jobtype: 'j', queue: q, args: [{ n: i }] });
// What the server wrote meanwhile (/proc/<pid>/io), per job: bytes passed
// to write calls on files (wchar; sockets' sendto is not counted) and bytes
// sent to the disk (write_bytes).
function diskMeter(pid) {
  const read = () => {
    try {
      const t = fs.readFileSync(`/proc/${pid}/io`, 'utf8');
      return { w: Number(/wchar: (\d+)/.exec(t)[1]), d: Number(/write_bytes: (\d+)/.exec(t)[1]) };
    } catch (e) { return null; }
  };
  const a = read();
  return (jobs) => {
    const b = read();
    return !a || !b ? {} : {
      server_wchar_per_job: Math.round((b.w - a.w) / jobs),
      server_disk_bytes_per_job: Math.round((b.d - a.d) / jobs),
    };
  };
}

async function bulkFill(client, q) {
  for (let b = 0; b < C.N; b += C.BULK) {
    const jobs = [];
    for (let i = b; i < Math.min(C.N, b + C.BULK); i++) jobs.push(job(q, i));
    const rejected = await client.pushBulk(jobs);
    if (Object.keys(rejected).length) throw new Error(`PUSHB rejected ${Object.keys(rejected).length} jobs`);
  }
}

// A Worker whose ACKs are counted: onAck(jid) runs once the server answered.
function countingWorker(q, conc, onFirst, onAck) {
  const w = new Worker({ url, queues: [q], concurrency: conc });
  w.register('j', async () => { onFirst(); });
  const ack = ackTimes.timed(w.client.ack.bind(w.client));
  w.client.ack = async (jid) => { const r = await ack(jid); onAck(jid); return r; };
  w.client.fetch = fetchTimes.timed(w.client.fetch.bind(w.client));
  // a Worker stopped mid-fetch reports its drained pool: expected here
  w.on('error', (e) => { if (!/draining/.test(e.message)) console.error('worker error', e.message); });
  return w;
}

async function main() {
  // The producer: one client whose pool lets BENCH_ENQ_CONC commands be in flight
  // (faktory-worker sends one command per pooled connection).
  const client = new Client({ url, poolSize: C.ENQ_CONC });
  if (phases.has('enqueue_single')) {
    const q = newQueue('enq1');
    const th = threadMeter(serverPid); const cm = await commitMeter();
    const m = C.cpuMeter(serverPid); const d = diskMeter(serverPid); const t0 = C.nowMs();
    const push = pushTimes.timed((i) => client.push(job(q, i)));
    await C.runConcurrent(C.N, C.ENQ_CONC, push);
    const ms = C.nowMs() - t0;
    out('enqueue_single', { jobs: C.N, conc: C.ENQ_CONC, jids: SEQ_JIDS ? 'seq' : undefined, ms,
      jobs_per_s: C.rate(C.N, ms), ...m(), ...d(C.N), ...pushTimes.stats('push'), ...th(C.N),
      ...await cm(C.N) });
  }
  if (phases.has('enqueue_bulk')) {
    const q = newQueue('enqb');
    const m = C.cpuMeter(serverPid); const t0 = C.nowMs();
    await bulkFill(client, q);
    const ms = C.nowMs() - t0;
    out('enqueue_bulk', { jobs: C.N, batch: C.BULK, ms, jobs_per_s: C.rate(C.N, ms), ...m() });
  }
  if (phases.has('process')) {
    for (const conc of C.PROC_CONCS) {
      const q = newQueue('proc');
      await bulkFill(client, q);
      let done = 0; let tFirst = null; let tLast = null;
      const th = threadMeter(serverPid); const cm = await commitMeter();
      const m = C.cpuMeter(serverPid);
      const n = Math.min(WORKERS, conc);
      const ws = Array.from({ length: n }, () => countingWorker(q, Math.ceil(conc / n),
        () => { if (tFirst === null) tFirst = C.nowMs(); }, () => { done++; tLast = C.nowMs(); }));
      const tStart = C.nowMs();
      await Promise.all(ws.map((w) => w.work()));
      const ok = await C.waitFor(() => done >= C.N);
      const cpu = m();
      const times = { ...fetchTimes.stats('fetch'), ...ackTimes.stats('ack'), ...th(done), ...await cm(done) }; // before the stop's last FETCH
      await Promise.all(ws.map((w) => w.stop()));
      const ms = tLast - tFirst;
      out('process', { conc, variant: n > 1 ? `${n} workers` : undefined, jobs: done, complete: ok, ms,
        jobs_per_s: C.rate(done, ms), startup_ms: +(tFirst - tStart).toFixed(1), ...cpu, ...times });
    }
  }
  if (phases.has('latency')) {
    const q = newQueue('lat');
    const sent = new Map(); const lats = [];
    const w = countingWorker(q, C.LAT_CONC, () => {}, (jid) => {
      const t = sent.get(jid); if (t !== undefined) lats.push(C.nowMs() - t);
    });
    await w.work();
    await C.sleep(500); // the worker's fetches are waiting
    const m = C.cpuMeter(serverPid);
    const total = await C.paced(C.LAT_RATE, C.LAT_SECS, (i) => {
      const jid = `lat-${process.pid}-${i}`;
      sent.set(jid, C.nowMs());
      return client.push({ jid, ...job(q, i) });
    });
    const ok = await C.waitFor(() => lats.length >= total, 30000);
    const cpu = m();
    await w.stop();
    out('latency', { rate: C.LAT_RATE, secs: C.LAT_SECS, conc: C.LAT_CONC, complete: ok, ...C.latencyStats(lats), ...cpu });
  }
  await client.close();
}

const hard = setTimeout(() => { console.error('hard timeout'); process.exit(3); }, 15 * 60 * 1000);
hard.unref();
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
