'use strict';
// SPDX-License-Identifier: MIT
//
// The Faktory frontend driven by the real Node client (faktory-worker from
// npm), checked over errand's HTTP API: a Faktory job and an HTTP job are the
// same job. tests/integration/test_faktory_node.py starts the server and runs
// `node client.test.js CASE` once a case (and `step:NAME`, the steps below,
// around a restart or across nodes); it exits 0 when the case passed.
// Env: FAKTORY_HOST, FAKTORY_PORT, FK_{PRODUCER,WORKER,ADMIN}_PASSWORD (errand
// tokens), ERRAND_URL, ERRAND_ADMIN_TOKEN.
const assert = require('node:assert/strict');
const { Client, Worker } = require('faktory-worker');

const HOST = process.env.FAKTORY_HOST || '127.0.0.1';
const PORT = process.env.FAKTORY_PORT;
const PASS = {
  producer: process.env.FK_PRODUCER_PASSWORD,
  worker: process.env.FK_WORKER_PASSWORD,
  admin: process.env.FK_ADMIN_PASSWORD,
};
const ERRAND_URL = process.env.ERRAND_URL;
const ADMIN_TOKEN = process.env.ERRAND_ADMIN_TOKEN;
const RUN = `${process.pid}-${Date.now().toString(36)}`;

const url = (password) => `tcp://:${encodeURIComponent(password)}@${HOST}:${PORT}`;
const queue = (name) => `${name}-${RUN}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Clients opened by a case, closed when it ends (a case may close one first).
const opened = [];
function client({ role = 'worker', wid, poolSize } = {}) {
  const c = new Client({ url: url(PASS[role]), wid, poolSize });
  opened.push(c);
  return c;
}

async function http(method, path, body, token = ADMIN_TOKEN) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(ERRAND_URL + path, { method, headers,
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

async function job(id) {
  const r = await http('GET', `/v1/jobs/${encodeURIComponent(id)}`);
  assert.equal(r.status, 200, `GET /v1/jobs/${id} -> ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.job;
}

// Polls fn until it returns a truthy value; fails naming `what` after `ms`.
async function until(what, fn, ms = 15000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
    await sleep(50);
  }
}

// Fetches from q until a job comes (FETCH returns null after its ~2 s wait).
async function fetchOne(c, q, ms = 15000) {
  return until(`a job on ${q}`, () => c.fetch(q), ms);
}

// A Worker on queue q whose handler is fn; the caller stops it.
function worker(q, fn, opts = {}) {
  const w = new Worker({ url: url(PASS.worker), queues: [q], concurrency: 2, ...opts });
  w.register('work', fn);
  w.on('error', () => {}); // a refused command shows in the case's own checks
  return w;
}

const cases = {
  // PUSH: the job is errand's job, args kept as the payload.
  async push() {
    const c = client({ role: 'producer' });
    const q = queue('push');
    const args = [1, 'two', { three: 3 }];
    const jid = await c.job('send-email', ...args).push();
    const j = await job(jid);
    assert.equal(j.id, jid);
    assert.equal(j.name, 'send-email');
    assert.equal(j.queue, 'default');
    assert.deepEqual(j.payload, args);
    assert.equal(j.state, 'waiting');
    assert.equal(j.max_attempts, 26, 'retry 25 (the client default) is 26 attempts');

    const jid2 = await c.push({ jobtype: 'resize', queue: q, args: [] });
    const j2 = await job(jid2);
    assert.equal(j2.queue, q);
    assert.deepEqual(j2.payload, []);
  },

  // PUSHB: every job taken, an empty rejection map; a bad job is named by jid.
  async push_bulk() {
    const c = client({ role: 'producer' });
    const q = queue('bulk');
    const jobs = Array.from({ length: 200 }, (_, i) => ({ jid: `b-${RUN}-${i}`, jobtype: 'bulk', queue: q, args: [i] }));
    const rejected = await c.pushBulk(jobs);
    assert.deepEqual(rejected, {});
    const j = await job(jobs[199].jid);
    assert.equal(j.state, 'waiting');
    assert.deepEqual(j.payload, [199]);
    const counts = await http('GET', `/v1/queues/${encodeURIComponent(q)}`);
    assert.equal(counts.status, 200, JSON.stringify(counts.body));
    assert.equal(counts.body.queue.counts.waiting, 200, JSON.stringify(counts.body));

    const good = { jid: `good-${RUN}`, jobtype: 'bulk', queue: q, args: [] };
    const bad = { jid: `bad-${RUN}`, jobtype: '', queue: q, args: [] };
    const r = await c.pushBulk([good, bad]);
    assert.deepEqual(Object.keys(r), [bad.jid], JSON.stringify(r));
    assert.equal(typeof r[bad.jid].reason, 'string');
    assert.equal((await job(good.jid)).state, 'waiting');
    const miss = await http('GET', `/v1/jobs/${bad.jid}`);
    assert.equal(miss.status, 404);
    const info = await c.info();
    assert.equal(info.faktory.queues[q], 201, JSON.stringify(info.faktory));
  },

  // FETCH and ACK with the Worker users run: handler sees the args, the job completes.
  async fetch_ack() {
    const p = client({ role: 'producer' });
    const q = queue('ack');
    const seen = [];
    const jid = await p.push({ jobtype: 'work', queue: q, args: [7, { x: 'y' }], custom: { group: 'tenant-1', trace_id: 'trace-7', tenant: 't1', tags: ['a', { b: 2 }] } });
    const w = worker(q, (...args) => async ({ job: j }) => { seen.push({ args, j }); });
    await w.work();
    try {
      await until('the job completed', async () => (await job(jid)).state === 'completed');
    } finally {
      await w.stop();
    }
    assert.equal(seen.length, 1);
    assert.deepEqual(seen[0].args, [7, { x: 'y' }]);
    assert.equal(seen[0].j.jid, jid);
    assert.equal(seen[0].j.jobtype, 'work');
    assert.equal(seen[0].j.queue, q);
    assert.deepEqual(seen[0].j.custom, { group: 'tenant-1', trace_id: 'trace-7', tenant: 't1', tags: ['a', { b: 2 }] });
    const j = await job(jid);
    assert.equal(j.attempts, 1);
    assert.equal(j.lease_owner, null);
    assert.equal(j.group, 'tenant-1');
    assert.equal(j.trace_id, 'trace-7');
    assert.deepEqual(j.custom, { group: 'tenant-1', trace_id: 'trace-7', tenant: 't1', tags: ['a', { b: 2 }] });
  },

  // FETCH waits about 2 s and returns null; it wakes at once when work comes;
  // queues are tried in the order given.
  async fetch_wait() {
    const c = client({ wid: `fw-${RUN}` });
    const p = client({ role: 'producer' });
    const q = queue('wait');
    const t0 = Date.now();
    assert.equal(await c.fetch(q), null);
    const waited = Date.now() - t0;
    assert.ok(waited >= 1500, `an empty FETCH returned after ${waited} ms`);

    const pending = c.fetch(q);
    await sleep(200);
    const jid = await p.push({ jobtype: 'w', queue: q, args: [] });
    const got = await pending;
    assert.ok(got, 'the waiting FETCH returned null instead of the job pushed while it waited');
    assert.equal(got.jid, jid);
    await c.ack(jid);

    const [q1, q2] = [queue('first'), queue('second')];
    const j2 = await p.push({ jobtype: 'w', queue: q2, args: [] });
    const j1 = await p.push({ jobtype: 'w', queue: q1, args: [] });
    assert.equal((await c.fetch(q1, q2)).jid, j1);
    assert.equal((await c.fetch(q1, q2)).jid, j2);
    await c.ack(j1);
    await c.ack(j2);
  },

  // A connection without a wid can push but not fetch.
  async fetch_needs_wid() {
    const c = client({ role: 'worker' });
    const q = queue('nowid');
    await c.push({ jobtype: 'w', queue: q, args: [] });
    await assert.rejects(c.fetch(q), /wid/);
  },

  // FAIL with a backtrace: errtype, message and backtrace kept on the job.
  async fail_backtrace() {
    const p = client({ role: 'producer' });
    const q = queue('fail');
    const jid = await p.push({ jobtype: 'work', queue: q, args: [], retry: 3 });
    const w = worker(q, () => async function failingHandler() {
      const e = new Error('the mail server said 451');
      e.code = 'SMTPError';
      throw e;
    });
    await w.work();
    let j;
    try {
      j = await until('the failure recorded', async () => {
        const x = await job(jid);
        return x.last_error ? x : null;
      });
    } finally {
      await w.stop();
    }
    const e = j.last_error;
    assert.equal(e.message, 'the mail server said 451');
    assert.equal(e.errtype, 'SMTPError', JSON.stringify(e));
    assert.ok(Array.isArray(e.backtrace), JSON.stringify(e));
    assert.match(e.backtrace[0], /the mail server said 451/);
    assert.ok(e.backtrace.some((l) => /failingHandler/.test(l)), JSON.stringify(e.backtrace));
    assert.equal(j.attempts, 1);
    assert.equal(j.state, 'scheduled', 'a failed job with retries left waits in the retry set');
  },

  // retry N: N retries on Faktory's schedule (15..45 s for the first), then dead.
  async retry() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `rt-${RUN}` });
    const q = queue('retry');
    const jid = await p.push({ jobtype: 'w', queue: q, args: [], retry: 1 });
    assert.equal((await job(jid)).max_attempts, 2);
    const t0 = Date.now();
    assert.equal((await fetchOne(c, q)).jid, jid);
    await c.fail(jid, Object.assign(new Error('first'), { code: 'E1' }));
    const j = await job(jid);
    assert.equal(j.state, 'scheduled');
    const delay = Date.parse(j.run_at) - t0;
    assert.ok(delay >= 14000 && delay <= 47000 + (Date.now() - t0),
      `the first retry is due in ${delay} ms, not Faktory's 15..45 s`);
  },

  // retry -1 and retry 0: dead at the first failure, nothing vanishes.
  async dead() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `dd-${RUN}` });
    const q = queue('dead');
    for (const retry of [-1, 0]) {
      const jid = await p.push({ jobtype: 'w', queue: q, args: [retry], retry });
      const got = await fetchOne(c, q);
      assert.equal(got.jid, jid);
      assert.equal(got.retry, retry);
      await c.fail(jid, new Error(`no retry (${retry})`));
      const j = await job(jid);
      assert.equal(j.state, 'dead', `retry ${retry}: ${JSON.stringify(j)}`);
      assert.equal(j.attempts, 1);
      assert.match(j.last_error.message, new RegExp(`no retry \\(${retry}\\)`));
      assert.equal(j.last_error.reason, retry === 0 ? 'discarded (retry 0)' : undefined,
        JSON.stringify(j.last_error));
    }
    const dlq = await http('GET', `/v1/dead?queue=${encodeURIComponent(q)}`);
    assert.equal(dlq.status, 200, JSON.stringify(dlq.body));
    assert.equal(dlq.body.jobs.length, 2, JSON.stringify(dlq.body));
  },

  // at: scheduled until then, fetched after; an `at` in the past runs now.
  async scheduled() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `sc-${RUN}` });
    const q = queue('at');
    const at = new Date(Date.now() + 3000);
    const jid = await p.push({ jobtype: 'w', queue: q, args: [], at: at.toISOString() });
    const j = await job(jid);
    assert.equal(j.state, 'scheduled');
    assert.equal(Date.parse(j.run_at), at.getTime());
    const got = await fetchOne(c, q);
    assert.equal(got.jid, jid);
    assert.ok(Date.now() >= at.getTime() - 50, 'fetched before its at');
    await c.ack(jid);

    const past = await p.push({ jobtype: 'w', queue: q, args: [], at: new Date(Date.now() - 60000).toISOString() });
    assert.equal((await job(past)).state, 'waiting');
  },

  // reserve_for: the lease. Past it the job goes back and another worker gets
  // it; the first worker's ACK is then refused. A worker that disconnects keeps
  // its reservation, and acknowledges on a new connection.
  async reserve_for() {
    const p = client({ role: 'producer' });
    const a = client({ wid: `ra-${RUN}` });
    const b = client({ wid: `rb-${RUN}` });
    const q = queue('reserve');
    const jid = await p.push({ jobtype: 'w', queue: q, args: [], reserve_for: 1 });
    assert.equal((await fetchOne(a, q)).jid, jid);
    const leased = await job(jid);
    assert.equal(leased.state, 'active');
    assert.equal(leased.lease_owner, `ra-${RUN}`);
    const again = await fetchOne(b, q);
    assert.equal(again.jid, jid, 'the expired reservation was not handed to the next worker');
    const j = await job(jid);
    assert.equal(j.stalled, 1);
    assert.equal(j.lease_owner, `rb-${RUN}`);
    await assert.rejects(a.ack(jid), 'an ACK by the worker whose lease expired was taken');
    await b.ack(jid);
    assert.equal((await job(jid)).state, 'completed');

    const wid = `rc-${RUN}`;
    const jid2 = await p.push({ jobtype: 'w', queue: q, args: [] });
    const c1 = client({ wid });
    assert.equal((await fetchOne(c1, q)).jid, jid2);
    await c1.close();
    const held = await job(jid2);
    assert.equal(held.state, 'active', 'a disconnect gave the reservation up');
    assert.equal(held.lease_owner, wid);
    assert.ok(Date.parse(held.lease_expires_at) - Date.now() > 1700 * 1000, 'default reserve_for is 1800 s');
    const c2 = client({ wid });
    await c2.ack(jid2);
    assert.equal((await job(jid2)).state, 'completed');
  },

  // BEAT: an operator quiets, then terminates, a worker process over HTTP.
  async beat_quiet_terminate() {
    const q = queue('beat');
    const wid = `bt-${RUN}`;
    const w = worker(q, () => async () => {}, { wid, beatInterval: 0.2 });
    let stopped = false;
    const stop = w.stop.bind(w);
    w.stop = async () => { stopped = true; return stop(); };
    await w.work();
    try {
      const listed = await until('the worker listed', async () => {
        const r = await http('GET', '/v1/workers');
        assert.equal(r.status, 200, JSON.stringify(r.body));
        return r.body.workers.find((x) => x.wid === wid);
      });
      assert.ok(listed.last_beat, JSON.stringify(listed));
      assert.equal(listed.pid, process.pid);
      assert.equal(listed.hostname, require('node:os').hostname());
      assert.equal(listed.state, 'running');
      const nope = await http('POST', '/v1/workers/nobody-here/quiet', {});
      assert.equal(nope.status, 404);
      const r1 = await http('POST', `/v1/workers/${wid}/quiet`, {});
      assert.equal(r1.status, 200, JSON.stringify(r1.body));
      await until('the worker quiet', () => w.quieted);
      assert.equal(stopped, false);
      const r2 = await http('POST', `/v1/workers/${wid}/terminate`, {});
      assert.equal(r2.status, 200, JSON.stringify(r2.body));
      await until('the worker stopped', () => stopped);
    } finally {
      if (!stopped) await w.stop();
    }
  },

  // MUTATE on the dead set: requeue redrives a dead letter (a fresh copy
  // {jid}-redrive-1 waits; the dead letter stays, marked redriven), discard
  // deletes one; on the retry set discard by jid cancels; only admins mutate.
  async mutate() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `mu-${RUN}` });
    const admin = client({ role: 'admin' });
    const q = queue('mutate');
    const dead = [];
    for (let i = 0; i < 2; i++) {
      const jid = await p.push({ jobtype: 'mdead', queue: q, args: [i], retry: 0 });
      assert.equal((await fetchOne(c, q)).jid, jid);
      await c.fail(jid, new Error(`boom ${i}`));
      assert.equal((await job(jid)).state, 'dead');
      dead.push(jid);
    }
    await assert.rejects(c.dead.withJids(dead[0]).requeue(), /permission|role|admin|denied|forbidden/i,
      'a worker password ran MUTATE');

    await admin.dead.withJids(dead[0]).requeue();
    const copy = await job(`${dead[0]}-redrive-1`);
    assert.equal(copy.state, 'waiting', JSON.stringify(copy));
    assert.deepEqual(copy.payload, [0]);
    const orig = await job(dead[0]);
    assert.equal(orig.state, 'dead');
    assert.equal(orig.redrive_count, 1);
    const got = await fetchOne(c, q);
    assert.equal(got.jid, copy.id);
    assert.deepEqual(got.args, [0]);
    await c.ack(got.jid);

    await admin.dead.withJids(dead[1]).discard();
    assert.equal((await http('GET', `/v1/jobs/${dead[1]}`)).status, 404);

    const retrying = await p.push({ jobtype: 'mretry', queue: q, args: [], retry: 5 });
    assert.equal((await fetchOne(c, q)).jid, retrying);
    await c.fail(retrying, new Error('again later'));
    assert.equal((await job(retrying)).state, 'scheduled');
    await admin.retries.withJids(retrying).discard();
    assert.equal((await job(retrying)).state, 'cancelled');
  },

  // MUTATE on the retry set (failed, waiting for a retry) and the scheduled
  // set (pushed with `at`), told apart without jids, with the client's
  // filters: matching (a glob on the job hash), ofType, withJids. INFO's
  // tasks sizes follow each change.
  async mutate_sets() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `ms-${RUN}` });
    const admin = client({ role: 'admin' });
    const q = queue('msets');
    const size = async (set) => (await admin.info()).faktory.tasks[set].size;
    const failed = async (jobtype, args) => {
      const jid = await p.push({ jobtype, queue: q, args, retry: 5 });
      assert.equal((await fetchOne(c, q)).jid, jid);
      await c.fail(jid, new Error('later'));
      assert.equal((await job(jid)).state, 'scheduled');
      return jid;
    };
    const state = async (jid) => (await job(jid)).state;
    const retries0 = await size('Retries');
    const scheduled0 = await size('Scheduled');
    const dead0 = await size('Dead');
    const r1 = await failed(`mk${RUN}`, ['uniquearg', RUN]);
    const r2 = await failed(`mk${RUN}`, ['plain', RUN]);
    const r3 = await failed(`mq${RUN}`, ['plain', RUN]);
    const at = new Date(Date.now() + 3600e3).toISOString();
    const s1 = await p.push({ jobtype: `sk${RUN}`, queue: q, args: ['uniquearg', RUN], at });
    const s2 = await p.push({ jobtype: `sq${RUN}`, queue: q, args: [RUN], at });
    const s3 = await p.push({ jobtype: `sc${RUN}`, queue: q, args: [RUN], at });
    assert.equal(await size('Retries'), retries0 + 3);
    assert.equal(await size('Scheduled'), scheduled0 + 3);

    await assert.rejects(c.retries.matching(`*${RUN}*`).kill(), /permission|role|admin|denied|forbidden/i,
      'a worker password ran MUTATE');
    // the glob takes r1 of the retry set, not s1 of the scheduled set
    await admin.retries.matching(`*"uniquearg","${RUN}"*`).kill();
    assert.equal(await state(r1), 'dead');
    assert.match((await job(r1)).last_error.message, /killed by Faktory MUTATE/);
    assert.equal(await state(s1), 'scheduled');
    assert.equal(await size('Dead'), dead0 + 1);
    assert.equal(await size('Retries'), retries0 + 2);

    await admin.retries.ofType(`mq${RUN}`).requeue();
    assert.equal(await state(r3), 'waiting');
    assert.equal(await state(r2), 'scheduled');
    const again = await fetchOne(c, q);
    assert.equal(again.jid, r3);
    await c.ack(r3);

    await admin.scheduled.withJids(s2).requeue();
    assert.equal(await state(s2), 'waiting');
    await c.ack((await fetchOne(c, q)).jid);
    await admin.scheduled.ofType(`sk${RUN}`).matching('*uniquearg*').kill();
    assert.equal(await state(s1), 'dead');
    await admin.retries.withJids(r2).discard();
    assert.equal(await state(r2), 'cancelled');
    // clear empties the whole set: its filter does not apply (the client's
    // docs say so, and the real server's mutateClear ignores it)
    const s4 = await p.push({ jobtype: `sd${RUN}`, queue: q, args: [RUN], at });
    await admin.scheduled.ofType(`sc${RUN}`).clear();
    assert.equal(await state(s3), 'cancelled');
    assert.equal(await state(s4), 'cancelled');
    assert.equal(await size('Retries'), retries0);
    assert.equal(await size('Scheduled'), 0);
    assert.equal(await size('Dead'), dead0 + 2);
  },

  // The extensions clients already expose: custom.unique_for refuses a twin
  // with NOTUNIQUE until the job succeeds; custom.expires_at keeps a job from
  // being handed out late (it is dead, not dropped).
  async unique_and_expiry() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `ue-${RUN}` });
    const q = queue('unique');
    const first = await p.push({ jobtype: 'u', queue: q, args: [1, 'a'], custom: { unique_for: 60 } });
    await assert.rejects(p.push({ jobtype: 'u', queue: q, args: [1, 'a'], custom: { unique_for: 60 } }),
      /NOTUNIQUE/);
    const other = await p.push({ jobtype: 'u', queue: q, args: [2, 'a'], custom: { unique_for: 60 } });
    for (let n = 0; n < 2; n++) await c.ack((await fetchOne(c, q)).jid);
    assert.equal((await job(first)).state, 'completed');
    assert.equal((await job(other)).state, 'completed');
    const again = await p.push({ jobtype: 'u', queue: q, args: [1, 'a'], custom: { unique_for: 60 } });
    assert.equal((await job(again)).state, 'waiting', 'the lock was not given back by the ACK');
    await c.ack((await fetchOne(c, q)).jid);

    const eq = queue('expiry');
    const expiresAt = new Date(Date.now() + 1000).toISOString();
    const jid = await p.push({ jobtype: 'e', queue: eq, args: [], custom: { expires_at: expiresAt } });
    await until('its expiry passed', async () => Date.now() > Date.parse(expiresAt) + 100);
    assert.equal(await c.fetch(eq), null, 'an expired job was handed out');
    const j = await job(jid);
    assert.equal(j.state, 'dead', JSON.stringify(j));
    assert.match(j.last_error.message, /expired/);
  },

  // Passwords are errand's tokens; each role gates its commands.
  async password() {
    const q = queue('pw');
    await assert.rejects(new Client({ url: url('not-a-token-at-all-0123') }).connect(), /password/i);
    await assert.rejects(new Client({ url: `tcp://${HOST}:${PORT}` }).connect(), /password/i);
    const p = client({ role: 'producer', wid: `pw-${RUN}` });
    const jid = await p.push({ jobtype: 'w', queue: q, args: [] });
    await assert.rejects(p.fetch(q), /permission|role|denied|forbidden|producer/i,
      'a producer password fetched');
    const w = client({ role: 'worker', wid: `pw2-${RUN}` });
    assert.equal((await fetchOne(w, q)).jid, jid);
    await w.ack(jid);
    await assert.rejects(w.flush(), /permission|role|denied|forbidden|admin/i, 'a worker password flushed');
    const info = await w.info();
    assert.equal(typeof info, 'object');
  },

  // One engine, two frontends: HTTP jobs over Faktory and Faktory jobs over HTTP.
  async http_interop() {
    const p = client({ role: 'producer' });
    const c = client({ wid: `hi-${RUN}` });
    const q = queue('interop');
    const r = await http('POST', `/v1/queues/${q}/jobs`, { name: 'from-http', payload: { to: 'a@b.c' }, id: `h-${RUN}` });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const got = await fetchOne(c, q);
    assert.equal(got.jid, `h-${RUN}`);
    assert.equal(got.jobtype, 'from-http');
    assert.deepEqual(got.args, [{ to: 'a@b.c' }], 'an object payload is fetched as args [payload]');
    await c.ack(got.jid);
    assert.equal((await job(got.jid)).state, 'completed');

    const jid = await p.push({ jobtype: 'from-faktory', queue: q, args: ['x', 2] });
    const f = await http('POST', '/v1/fetch', { queues: [q], worker_id: `hw-${RUN}`, max: 1, wait_ms: 2000 });
    assert.equal(f.status, 200, JSON.stringify(f.body));
    assert.equal(f.body.jobs.length, 1);
    const hj = f.body.jobs[0];
    assert.equal(hj.id, jid);
    assert.deepEqual(hj.payload, ['x', 2]);
    const done = await http('POST', `/v1/jobs/${jid}/complete`, { lease_token: hj.lease_token });
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.equal((await job(jid)).state, 'completed');
  },
};

// Steps the Python test runs around a restart or across PostgreSQL nodes;
// STEP_QUEUE, STEP_WID and STEP_JID say what to act on. A step prints one
// JSON line of what the next one needs.
// TLS (errand serve --faktory-tls-cert/-key): the client takes a tcp+tls://
// URL and Node's tls.connect options in tlsOptions (FAKTORY_TLS_CA: the
// server's certificate, self-signed by the test).
const tlsUrl = (password) => `tcp+tls://:${encodeURIComponent(password)}@${HOST}:${PORT}`;
function tlsClient(tlsOptions, wid) {
  const c = new Client({ url: tlsUrl(PASS.worker), wid, tlsOptions });
  opened.push(c);
  return c;
}

const steps = {
  // Push, fetch and ack over TLS, the server's certificate verified against
  // FAKTORY_TLS_CA; and a Worker over TLS.
  async tls() {
    const ca = [require('node:fs').readFileSync(process.env.FAKTORY_TLS_CA)];
    const q = queue('tls');
    const c = tlsClient({ ca }, `tls-${RUN}`);
    const jid = await c.push({ jobtype: 'work', queue: q, args: [1, 'two'] });
    const got = await fetchOne(c, q);
    assert.equal(got.jid, jid);
    assert.deepEqual(got.args, [1, 'two']);
    await c.ack(jid);
    assert.equal((await job(jid)).state, 'completed');
    const jid2 = await c.push({ jobtype: 'work', queue: q, args: [3] });
    const seen = [];
    const w = worker(q, async (n) => { seen.push(n); }, { tlsOptions: { ca }, url: tlsUrl(PASS.worker) });
    await w.work();
    await until('the worker ran the job', async () => (await job(jid2)).state === 'completed');
    await w.stop();
    assert.deepEqual(seen, [3]);
  },
  // rejectUnauthorized false: the insecure option connects to the
  // self-signed server without its certificate.
  async tls_insecure() {
    const c = tlsClient({ rejectUnauthorized: false });
    const jid = await c.push({ jobtype: 'work', queue: queue('tls-insecure'), args: [] });
    assert.equal((await job(jid)).state, 'waiting');
  },
  // Without the CA the self-signed certificate is refused by the client:
  // the push fails (the pool's own log, on stderr, says why) and nothing is
  // enqueued.
  async tls_untrusted() {
    const c = tlsClient({});
    const q = queue('tls-untrusted');
    await assert.rejects(c.push({ jobtype: 'work', queue: q, args: [], jid: `untrusted-${RUN}` }));
    const r = await http('GET', `/v1/jobs/untrusted-${RUN}`);
    assert.equal(r.status, 404);
  },
  // Pushes a job to STEP_QUEUE and fetches it as STEP_WID.
  async push_fetch() {
    const p = client({ role: 'producer' });
    const c = client({ wid: process.env.STEP_WID });
    const jid = await p.push({ jobtype: 'step', queue: process.env.STEP_QUEUE, args: ['x'] });
    assert.equal((await fetchOne(c, process.env.STEP_QUEUE)).jid, jid);
    assert.equal((await job(jid)).lease_owner, process.env.STEP_WID);
    process.stdout.write(JSON.stringify({ jid }) + '\n');
  },
  // Acknowledges STEP_JID as STEP_WID; the job is completed.
  async ack() {
    const c = client({ wid: process.env.STEP_WID });
    await c.ack(process.env.STEP_JID);
    assert.equal((await job(process.env.STEP_JID)).state, 'completed');
  },
};

async function main() {
  const names = process.argv.slice(2);
  if (!names.length) {
    process.stdout.write(Object.keys(cases).join('\n') + '\n');
    return;
  }
  for (const n of names) {
    const fn = n.startsWith('step:') ? steps[n.slice(5)] : cases[n];
    if (!fn) throw new Error(`no case ${n}`);
    try {
      await fn();
    } finally {
      await Promise.allSettled(opened.splice(0).map((c) => c.close()));
    }
  }
}

const hard = setTimeout(() => { console.error('hard timeout (90 s)'); process.exit(3); }, 90000);
hard.unref();
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
