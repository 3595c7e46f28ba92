// SPDX-License-Identifier: MIT
//
// The dashboard in a real browser: Debian's headless Chromium driven by
// playwright-core, against a running `errand serve` with tokens
// (tests/integration/test_dashboard.py starts it and runs this file).
// Environment: ERRAND_URL (http://127.0.0.1:PORT), ERRAND_ADMIN_TOKEN;
// ERRAND_SCREENSHOTS=DIR saves PNGs of the main pages there.
// Exits 0 when every check passed, 1 with the failures on stderr.
'use strict';

const assert = require('assert');
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

const BASE = process.env.ERRAND_URL;
const ADMIN = process.env.ERRAND_ADMIN_TOKEN;
const VIEWER = process.env.ERRAND_VIEWER_TOKEN;
const SHOTS = process.env.ERRAND_SCREENSHOTS || '';
const CHROMIUM = process.env.ERRAND_CHROMIUM || '/usr/bin/chromium';
if (!BASE || !ADMIN || !VIEWER) {
  console.error('set ERRAND_URL, ERRAND_ADMIN_TOKEN and ERRAND_VIEWER_TOKEN');
  process.exit(2);
}

// The API with the admin's bearer token, from node (not the browser).
async function api(method, p, body) {
  const opts = { method, headers: { Authorization: 'Bearer ' + ADMIN } };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(BASE + p, opts);
  const t = await r.text();
  return { status: r.status, body: t ? JSON.parse(t) : null };
}

async function ok(method, p, body) {
  const r = await api(method, p, body);
  assert.ok(r.status >= 200 && r.status < 300, method + ' ' + p + ': ' + r.status + ' ' + JSON.stringify(r.body));
  return r.body;
}

const HOSTILE_SCRIPT = '<script>window.__xss = "script"; console.log("XSS-RAN")</script>';
const HOSTILE_IMG = '<img src=x onerror="window.__xss = \'img\'; alert(1)">';

async function seed() {
  await ok('POST', '/v1/queues/emails/jobs', { name: 'send-welcome', payload: { to: 'ada@example.com' }, id: 'welcome-1' });
  await ok('POST', '/v1/queues/emails/jobs', { name: 'digest', payload: { day: 'mon' }, delay_ms: 3600000 });
  await ok('POST', '/v1/queues/billing/jobs', { name: 'charge', payload: { amount: 42 }, id: 'charge-1' });
  await ok('POST', '/v1/queues/billing/jobs', {
    name: 'charge', id: 'xss-1',
    payload: { note: HOSTILE_SCRIPT, img: HOSTILE_IMG },
  });
  // charge-1 and xss-1 die with a permanent failure whose message is hostile too
  const f = await ok('POST', '/v1/fetch', { queues: ['billing'], worker_id: 'browser-test', max: 2 });
  assert.strictEqual(f.jobs.length, 2);
  for (const j of f.jobs) {
    await ok('POST', '/v1/jobs/' + encodeURIComponent(j.id) + '/fail', {
      lease_token: j.lease_token,
      error: { class: 'permanent', message: j.id === 'xss-1' ? HOSTILE_IMG : 'card expired' },
    });
  }
  // three more dead letters for the bulk actions
  for (const id of ['bulk-1', 'bulk-2', 'bulk-3']) {
    await ok('POST', '/v1/queues/bulkq/jobs', { name: 'sync', payload: {}, id });
  }
  const g = await ok('POST', '/v1/fetch', { queues: ['bulkq'], worker_id: 'browser-test', max: 3 });
  for (const j of g.jobs) {
    await ok('POST', '/v1/jobs/' + j.id + '/fail', { lease_token: j.lease_token,
      error: { class: 'permanent', message: 'upstream gone' } });
  }
  await ok('PUT', '/v1/schedulers/nightly-report', {
    cron: '0 3 * * *', tz: 'Asia/Ho_Chi_Minh', queue: 'reports', name: 'nightly', payload: {},
  });
  const lease = await ok('POST', '/v1/leases', { type: 'report', code: 'nightly', run_key: '2026-11-30', ttl_ms: 600000 });
  assert.ok(lease.owner_token);
  await ok('PUT', '/v1/cursors/billing-sync', { value: { offset: 1234 } });
  await ok('PUT', '/v1/schedulers/ny-digest', {
    cron: '30 8 * * 1-5', tz: 'America/New_York', queue: 'emails', name: 'digest', payload: {},
  });
}

const failures = [];
async function check(name, fn) {
  try {
    await fn();
    console.log('ok   ' + name);
  } catch (e) {
    failures.push(name);
    console.error('FAIL ' + name + '\n     ' + (e && e.stack ? e.stack : e));
  }
}

async function shot(page, name) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, name + '.png'), fullPage: false });
}

// Shows the view of `hash` and waits until it rendered afresh (app.js
// stamps #main with the view and a render number) and holds `selector`.
async function show(page, hash, selector) {
  const before = await page.evaluate(() => document.getElementById('main').getAttribute('data-loaded'));
  await page.evaluate(h => { location.hash = h; }, hash);
  await page.waitForFunction(([h, b, sel]) => {
    const m = document.getElementById('main');
    return m.getAttribute('data-view') === h && m.getAttribute('data-loaded') !== b &&
      document.querySelector(sel) !== null;
  }, [hash, before, selector], { timeout: 10000 });
}

async function main() {
  if (!fs.existsSync(CHROMIUM)) {
    console.error(CHROMIUM + ' is missing: install Debian\'s chromium package (scripts/deps)');
    process.exit(1);
  }
  await seed();
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    await check('without a session every page and API call is refused', async () => {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(BASE + '/ui/');
      assert.strictEqual(new URL(page.url()).pathname, '/ui/login');
      for (const p of ['/v1/queues', '/v1/dead', '/v1/schedulers', '/v1/jobs/welcome-1',
        '/v1/queues/emails/jobs?state=waiting', '/v1/audit', '/ui/session']) {
        const r = await ctx.request.get(BASE + p);
        assert.strictEqual(r.status(), 401, p);
      }
      const r = await ctx.request.post(BASE + '/v1/queues/emails/pause');
      assert.strictEqual(r.status(), 401);
      await shot(page, 'login');
      await ctx.close();
    });

    const ctx = await browser.newContext({ viewport: { width: 1280, height: 760 } });
    const page = await ctx.newPage();
    const dialogs = [];
    const consoleLines = [];
    page.on('dialog', d => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    page.on('console', m => consoleLines.push(m.text()));

    await check('a wrong token is refused at login', async () => {
      await page.goto(BASE + '/ui/login');
      await page.fill('#token', 'not-the-right-token-at-all');
      await Promise.all([page.waitForURL(/failed=1/), page.click('#login-submit')]);
      assert.ok(await page.isVisible('#login-failed'));
    });

    await check('log in and see the queues', async () => {
      await page.goto(BASE + '/ui/login');
      await page.fill('#token', ADMIN);
      await Promise.all([page.waitForURL(BASE + '/ui/'), page.click('#login-submit')]);
      await page.waitForSelector('#queues tr[data-queue="emails"]');
      const who = await page.textContent('#who');
      assert.match(who, /admin/);
    });

    await check('a queue\'s counts change after enqueueing (live update)', async () => {
      const cell = '#queues tr[data-queue="emails"] td[data-count="waiting"]';
      const before = Number(await page.textContent(cell));
      await ok('POST', '/v1/queues/emails/jobs', { name: 'send-welcome', payload: {} });
      await ok('POST', '/v1/queues/emails/jobs', { name: 'send-welcome', payload: {} });
      await page.waitForFunction(([sel, want]) => {
        const c = document.querySelector(sel);
        return c && Number(c.textContent) === want;
      }, [cell, before + 2], { timeout: 15000 });
      await shot(page, 'queues');
    });

    await check('a queue with a depth history gets its chart, one without none', async () => {
      // the server samples every 30 s, so within the test a queue has one
      // sample at most: the page asks for the real history, and the browser
      // adds an earlier sample to emails' before the page sees it
      const isList = url => url.pathname === '/v1/queues';
      let shape = null, billingSamples = 0;
      await page.route(isList, async route => {
        const r = await route.fetch();
        const j = await r.json();
        j.queues.forEach(q => {
          if (!q.history || !Array.isArray(q.history.waiting)) return;
          shape = q.history.waiting.length + '/' + q.history.interval_ms;
          if (q.name === 'emails') { q.history.waiting[117] = 1; q.history.waiting[118] = 3; }
          if (q.name === 'billing')
            billingSamples = q.history.waiting.filter(v => typeof v === 'number').length;
        });
        await route.fulfill({ response: r, json: j });
      });
      await page.waitForSelector('#queues tr[data-queue="emails"] svg.chart polyline', { timeout: 10000 });
      assert.strictEqual(shape, '120/30000', 'the page asks for ?history=1 and gets its shape');
      // billing has a chart only once the server took two samples of it (a slow run)
      assert.strictEqual(await page.$('#queues tr[data-queue="billing"] svg.chart') !== null,
                         billingSamples >= 2);
      await page.unroute(isList);
    });

    await check('pause a queue', async () => {
      const row = '#queues tr[data-queue="emails"]';
      await page.click(row + ' button[data-action="pause"]');
      await page.waitForSelector(row + ' td[data-paused="true"]', { timeout: 10000 });
      const q = await ok('GET', '/v1/queues/emails');
      assert.strictEqual(q.queue.paused, true);
      await page.click(row + ' button[data-action="resume"]');
      await page.waitForSelector(row + ' td[data-paused="false"]', { timeout: 10000 });
    });

    await check('the job list and a job\'s detail', async () => {
      await show(page, '#/queue/emails/waiting', '#jobs tr[data-job="welcome-1"]');
      await shot(page, 'jobs');
      await show(page, '#/job/welcome-1', '#job-payload');
      const text = await page.textContent('#job-payload');
      assert.deepStrictEqual(JSON.parse(text), { to: 'ada@example.com' });
      assert.match(await page.textContent('#job-timeline'), /Created/);
    });

    await check('search by id opens the job', async () => {
      await show(page, '#/queues', '#queues');
      await page.fill('#search-id', 'charge-1');
      await page.press('#search-id', 'Enter');
      await page.waitForFunction(() => {
        const f = document.querySelector('#job-facts');
        return location.hash === '#/job/charge-1' && f && f.textContent.includes('charge-1');
      }, null, { timeout: 10000 });
    });

    await check('a hostile payload and error render as text and run nothing', async () => {
      await show(page, '#/job/xss-1', '#job-payload');
      const payload = JSON.parse(await page.textContent('#job-payload'));
      assert.strictEqual(payload.note, HOSTILE_SCRIPT);
      assert.strictEqual(payload.img, HOSTILE_IMG);
      assert.ok((await page.textContent('#job-error')).includes(HOSTILE_IMG));
      await shot(page, 'job');
      await show(page, '#/dead', '#dead tr[data-job="xss-1"]');
      assert.ok((await page.textContent('#dead tr[data-job="xss-1"]')).includes(HOSTILE_IMG));
      await page.waitForTimeout(300); // an onerror would have fired by now
      const found = await page.evaluate(() => ({
        xss: window.__xss,
        imgs: document.querySelectorAll('main img, main script').length,
      }));
      assert.strictEqual(found.xss, undefined);
      assert.strictEqual(found.imgs, 0);
      assert.deepStrictEqual(dialogs, []);
      assert.ok(!consoleLines.some(l => l.includes('XSS-RAN')), consoleLines.join('\n'));
    });

    await check('open a dead letter and redrive it (with confirmation)', async () => {
      await show(page, '#/dead', '#dead tr[data-job="charge-1"]');
      await shot(page, 'dead');
      await page.click('#dead tr[data-job="charge-1"] button[data-action="redrive"]');
      await page.waitForSelector('#confirm:not([hidden])');
      await page.click('#confirm-no'); // cancelled: nothing happens
      let j = await api('GET', '/v1/jobs/charge-1-redrive-1');
      assert.strictEqual(j.status, 404);
      await show(page, '#/job/charge-1', '#job-actions button[data-action="redrive"]');
      await page.click('#job-actions button[data-action="redrive"]');
      await page.click('#confirm-yes');
      for (let i = 0; i < 50; i++) {
        j = await api('GET', '/v1/jobs/charge-1-redrive-1');
        if (j.status === 200) break;
        await new Promise(r => setTimeout(r, 100));
      }
      assert.strictEqual(j.status, 200);
      assert.strictEqual(j.body.job.state, 'waiting');
    });

    await check('schedulers show their next runs in their own zones', async () => {
      await show(page, '#/schedulers', '#schedulers tr[data-scheduler="nightly-report"]');
      const row = await page.textContent('#schedulers tr[data-scheduler="nightly-report"]');
      assert.match(row, /Asia\/Ho_Chi_Minh/);
      assert.match(row, /T03:00:00\+07:00/);
      const ny = await page.textContent('#schedulers tr[data-scheduler="ny-digest"]');
      assert.match(ny, /T08:30:00-0[45]:00/);
      await shot(page, 'schedulers');
    });

    await check('leases and cursors pages', async () => {
      await show(page, '#/leases', '#leases tbody tr');
      const t = await page.textContent('#leases');
      assert.match(t, /nightly/);
      assert.match(t, /2026-11-30/);
      await show(page, '#/cursors', '#cursors tr[data-cursor="billing-sync"]');
      assert.match(await page.textContent('#cursors'), /1234/);
    });

    await check('the audit page lists the actions taken', async () => {
      await show(page, '#/audit', '#audit tbody tr');
      const t = await page.textContent('#audit');
      assert.match(t, /queue\.pause/);
      assert.match(t, /dead\.redrive/);
      assert.match(t, /ui\.login_failed/);
    });

    await check('a forged POST without the CSRF token is refused', async () => {
      const statuses = await page.evaluate(async () => {
        const a = await fetch('/v1/queues/emails/pause', { method: 'POST', credentials: 'same-origin' });
        const b = await fetch('/v1/queues/emails/pause', { method: 'POST', credentials: 'same-origin',
          headers: { 'X-CSRF-Token': 'f'.repeat(64) } });
        const c = await fetch('/v1/dead/xss-1', { method: 'DELETE', credentials: 'same-origin' });
        return [a.status, b.status, c.status];
      });
      assert.deepStrictEqual(statuses, [403, 403, 403]);
      const q = await ok('GET', '/v1/queues/emails');
      assert.strictEqual(q.queue.paused, false);
      assert.strictEqual((await api('GET', '/v1/jobs/xss-1')).body.job.state, 'dead');
    });

    await check('the live refresh pauses while the tab is hidden', async () => {
      await show(page, '#/queues', '#queues');
      const hidden = await page.evaluate(async () => {
        Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
        document.dispatchEvent(new Event('visibilitychange'));
        const before = document.getElementById('main').getAttribute('data-loaded');
        await new Promise(r => setTimeout(r, 4000));
        const after = document.getElementById('main').getAttribute('data-loaded');
        Object.defineProperty(document, 'visibilityState', { value: 'visible', configurable: true });
        document.dispatchEvent(new Event('visibilitychange'));
        return before === after;
      });
      assert.ok(hidden, 'the page refreshed while hidden');
    });

    await check('bulk: delete selected dead letters, redrive the rest by filter', async () => {
      await show(page, '#/dead/bulkq', '#dead tr[data-job="bulk-3"]');
      await page.check('#dead input[data-select="bulk-1"]');
      await page.check('#dead input[data-select="bulk-2"]');
      await page.waitForTimeout(3500); // a live refresh keeps the ticks
      assert.ok(await page.isChecked('#dead input[data-select="bulk-1"]'));
      await page.click('text=Delete selected');
      await page.waitForSelector('#confirm:not([hidden])');
      assert.match(await page.textContent('#confirm-text'), /2 selected/);
      await shot(page, 'bulk');
      await page.click('#confirm-yes');
      await page.waitForFunction(() => !document.querySelector('#dead tr[data-job="bulk-1"]'), null, { timeout: 10000 });
      assert.strictEqual((await api('GET', '/v1/jobs/bulk-2')).status, 404);
      await page.click('text=Redrive every dead letter of queue bulkq');
      await page.waitForSelector('#confirm:not([hidden])');
      assert.match(await page.textContent('#confirm-text'), /1 job\(s\) match/);
      await page.click('#confirm-yes');
      let j;
      for (let i = 0; i < 50; i++) {
        j = await api('GET', '/v1/jobs/bulk-3-redrive-1');
        if (j.status === 200) break;
        await new Promise(r => setTimeout(r, 100));
      }
      assert.strictEqual(j.status, 200);
    });

    await check('bulk: cancel every waiting job of a queue, after a count', async () => {
      const before = (await ok('GET', '/v1/queues/bulkq')).queue.counts.waiting;
      assert.strictEqual(before, 1);
      await show(page, '#/queue/bulkq/waiting', '#jobs tr[data-job="bulk-3-redrive-1"]');
      await page.click('text=Cancel every waiting job of bulkq');
      await page.waitForSelector('#confirm:not([hidden])');
      assert.match(await page.textContent('#confirm-text'), /1 job\(s\) match/);
      await page.click('#confirm-yes');
      await page.waitForFunction(() => !document.querySelector('#jobs tr[data-job="bulk-3-redrive-1"]'), null, { timeout: 10000 });
      assert.strictEqual((await ok('GET', '/v1/jobs/bulk-3-redrive-1')).job.state, 'cancelled');
      const audit = await ok('GET', '/v1/audit?limit=50');
      const acts = audit.entries.map(e => e.action + ':' + e.count);
      assert.ok(acts.includes('bulk.delete:2') && acts.includes('bulk.redrive:1') && acts.includes('bulk.cancel:1'), acts.join(' '));
    });

    await check('log out ends the session', async () => {
      await Promise.all([page.waitForURL(/\/ui\/login/), page.click('#logout')]);
      const r = await ctx.request.get(BASE + '/v1/queues');
      assert.strictEqual(r.status(), 401);
    });
    await ctx.close();

    await check('a viewer session sees no payload and no admin buttons', async () => {
      const vctx = await browser.newContext();
      const vpage = await vctx.newPage();
      await vpage.goto(BASE + '/ui/login');
      await vpage.fill('#token', VIEWER);
      await Promise.all([vpage.waitForURL(BASE + '/ui/'), vpage.click('#login-submit')]);
      await vpage.waitForSelector('#queues tr[data-queue="emails"]');
      assert.match(await vpage.textContent('#who'), /viewer/);
      assert.strictEqual(await vpage.$$eval('#queues button', b => b.length), 0);
      await show(vpage, '#/job/xss-1', '#job-payload-hidden');
      assert.strictEqual(await vpage.$('#job-payload'), null);
      const body = await vpage.textContent('main');
      assert.ok(!body.includes('window.__xss = "script"'), 'the payload reached the viewer');
      await show(vpage, '#/dead', '#dead tr[data-job="xss-1"]');
      assert.strictEqual(await vpage.$$eval('#dead button', b => b.length), 0);
      await vctx.close();
    });
  } finally {
    await browser.close();
  }
  if (failures.length) {
    console.error(failures.length + ' failed: ' + failures.join('; '));
    process.exit(1);
  }
  console.log('all passed');
}

main().catch(e => { console.error(e && e.stack ? e.stack : e); process.exit(1); });
