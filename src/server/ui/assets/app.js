// SPDX-License-Identifier: MIT
// The errand dashboard: one page that reads the /v1 JSON API with the
// session cookie and sends the session's CSRF token with every change.
// Every value from the server is put into the page with textContent (el()
// below), never parsed as HTML, so a payload holding markup shows as text.
'use strict';

var session = null;          // GET /ui/session: role, name, csrf_token, open
var refreshTimer = null;
var REFRESH_MS = 3000;
var STATES = ['waiting', 'scheduled', 'active', 'completed', 'dead', 'cancelled'];

// ---- helpers ----

// el('td', {class: 'num'}, 'text', child...): attributes are set with
// setAttribute (never on* handlers), children are nodes or text.
function el(tag, attrs) {
  var n = document.createElement(tag);
  if (attrs) {
    Object.keys(attrs).forEach(function (k) {
      if (attrs[k] !== null && attrs[k] !== undefined) n.setAttribute(k, attrs[k]);
    });
  }
  for (var i = 2; i < arguments.length; i++) add(n, arguments[i]);
  return n;
}

function add(n, c) {
  if (c === null || c === undefined) return;
  if (Array.isArray(c)) { c.forEach(function (x) { add(n, x); }); return; }
  if (typeof c === 'object' && c.nodeType) { n.appendChild(c); return; }
  n.appendChild(document.createTextNode(String(c)));
}

function button(text, onclick, cls) {
  var b = el('button', {type: 'button', class: cls || null}, text);
  b.addEventListener('click', onclick);
  return b;
}

function link(text, hash) {
  return el('a', {href: '#' + hash}, text);
}

function enc(s) { return encodeURIComponent(s); }

function status(msg) {
  document.getElementById('status').textContent = msg || '';
}

function age(ms) {
  if (ms === null || ms === undefined) return '—';
  var s = Math.floor(ms / 1000);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

function orDash(v) { return v === null || v === undefined || v === '' ? '—' : v; }

function isAdmin() { return session && (session.open || session.role === 'admin'); }

// ---- the API ----

function api(method, path, body) {
  var opts = {method: method, credentials: 'same-origin', headers: {}};
  if (method !== 'GET') opts.headers['X-CSRF-Token'] = session ? session.csrf_token : '';
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  return fetch(path, opts).then(function (r) {
    if (r.status === 401) { location.href = '/ui/login'; throw new Error('not logged in'); }
    return r.text().then(function (t) {
      var j = null;
      try { j = t ? JSON.parse(t) : null; } catch (e) { j = null; }
      if (!r.ok) {
        var m = j && j.error ? j.error.message : ('HTTP ' + r.status);
        throw new Error(m);
      }
      return j;
    });
  });
}

// An in-page confirmation (no window.confirm: nothing modal the page does
// not own). Resolves true when confirmed.
function confirmAction(text) {
  return new Promise(function (resolve) {
    var box = document.getElementById('confirm');
    document.getElementById('confirm-text').textContent = text;
    box.hidden = false;
    var yes = document.getElementById('confirm-yes');
    var no = document.getElementById('confirm-no');
    function done(v) {
      box.hidden = true;
      yes.removeEventListener('click', onYes);
      no.removeEventListener('click', onNo);
      resolve(v);
    }
    function onYes() { done(true); }
    function onNo() { done(false); }
    yes.addEventListener('click', onYes);
    no.addEventListener('click', onNo);
    yes.focus();
  });
}

function act(promise, okMsg) {
  return promise.then(function () { status(''); flash(okMsg); render(); })
    .catch(function (e) { status(e.message); });
}

function flash(msg) {
  var s = document.getElementById('status');
  s.textContent = msg || '';
  s.className = 'status ok';
  setTimeout(function () { if (s.textContent === msg) { s.textContent = ''; s.className = 'status'; } }, 3000);
}

// ---- bulk actions ----

// Ids ticked in the current list; kept across live refreshes, cleared when
// the view changes.
var selected = new Set();
var selectedView = '';

function checkbox(id) {
  var b = el('input', {type: 'checkbox', 'data-select': id, 'aria-label': 'select ' + id});
  b.checked = selected.has(id);
  b.addEventListener('change', function () {
    if (b.checked) selected.add(id); else selected.delete(id);
  });
  return b;
}

// Runs POST /v1/bulk on the ticked ids, after a confirmation.
function bulkSelected(action, what) {
  var ids = Array.from(selected);
  if (!ids.length) { status('Nothing selected.'); return; }
  confirmAction(what + ' ' + ids.length + ' selected job(s)?').then(function (ok) {
    if (!ok) return;
    act(api('POST', '/v1/bulk', {action: action, ids: ids}).then(function (r) {
      selected.clear();
      return r;
    }), what + ': done');
  });
}

// Counts a filter's jobs with a dry run, asks, then runs the action (in
// chunks of 1,000 on the server).
function bulkFilter(action, filter, what) {
  api('POST', '/v1/bulk', {action: action, filter: filter, dry_run: true}).then(function (c) {
    if (!c.count) { status('No jobs match.'); return; }
    return confirmAction(what + ': ' + c.count + ' job(s) match. Go ahead?').then(function (ok) {
      if (!ok) return;
      return act(api('POST', '/v1/bulk', {action: action, filter: filter}), what + ': done');
    });
  }).catch(function (e) { status(e.message); });
}

function bulkBar(buttons) {
  return el('p', {class: 'bulk'}, buttons.map(function (b) { return [b, ' ']; }));
}

// ---- views ----

// A small line chart of a queue's depth over the last hour, from its
// `history` (GET /v1/queues?history=1: waiting jobs every 30 s, null where
// the server took no sample); nothing with fewer than two samples.
function depthChart(q) {
  var w0 = q.history && Array.isArray(q.history.waiting) ? q.history.waiting : [];
  var ys = w0.filter(function (v) { return typeof v === 'number'; });
  if (ys.length < 2) return null;
  var max = Math.max.apply(null, ys.concat([1]));
  var w = 120, h = 24, ns = 'http://www.w3.org/2000/svg';
  var svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
  var pts = ys.map(function (y, i) {
    return (i * w / (ys.length - 1)).toFixed(1) + ',' + (h - 1 - y * (h - 2) / max).toFixed(1);
  });
  var line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts.join(' '));
  svg.appendChild(line);
  var title = document.createElementNS(ns, 'title');
  title.textContent = 'depth over the last hour, max ' + max;
  svg.appendChild(title);
  return svg;
}

function viewQueues() {
  return api('GET', '/v1/queues?history=1').then(function (j) {
    var rows = j.queues.map(function (q) {
      var c = q.counts || {};
      var paused = q.paused;
      var btn = null;
      if (isAdmin()) {
        btn = paused
          ? button('Resume', function () { act(api('POST', '/v1/queues/' + enc(q.name) + '/resume'), 'Resumed ' + q.name); })
          : button('Pause', function () { act(api('POST', '/v1/queues/' + enc(q.name) + '/pause'), 'Paused ' + q.name); });
        btn.setAttribute('data-action', paused ? 'resume' : 'pause');
      }
      return el('tr', {'data-queue': q.name},
        el('td', null, link(q.name, '/queue/' + enc(q.name) + '/waiting')),
        STATES.map(function (s) {
          var to = s === 'dead' ? '/dead/' + enc(q.name) : '/queue/' + enc(q.name) + '/' + s;
          return el('td', {class: 'num', 'data-count': s}, link(String(c[s] || 0), to));
        }),
        el('td', {class: 'num'}, age(q.oldest_waiting_age_ms)),
        el('td', {class: paused ? 'paused' : null, 'data-paused': String(!!paused)}, paused ? 'paused' : 'running'),
        el('td', null, depthChart(q)),
        el('td', null, btn));
    });
    return [el('h1', null, 'Queues'),
      rows.length ? el('table', {id: 'queues'},
        el('thead', null, el('tr', null, el('th', null, 'Queue'),
          STATES.map(function (s) { return el('th', {class: 'num'}, s); }),
          el('th', {class: 'num'}, 'Oldest waiting'), el('th', null, 'State'),
          el('th', null, 'Depth, last hour'), el('th', null, ''))),
        el('tbody', null, rows))
        : el('p', {class: 'muted'}, 'No queues yet.')];
  });
}

function jobRows(jobs, dead, selectable) {
  return jobs.map(function (jb) {
    var actions = null;
    if (dead && isAdmin()) {
      actions = [
        button('Redrive', function () {
          confirmAction('Redrive dead job ' + jb.id + '? A copy goes back to waiting.').then(function (ok) {
            if (ok) act(api('POST', '/v1/dead/' + enc(jb.id) + '/redrive'), 'Redriven ' + jb.id);
          });
        }), ' ',
        button('Delete', function () {
          confirmAction('Delete dead job ' + jb.id + '? This cannot be undone.').then(function (ok) {
            if (ok) act(api('DELETE', '/v1/dead/' + enc(jb.id)), 'Deleted ' + jb.id);
          });
        }, 'danger')];
      actions[0].setAttribute('data-action', 'redrive');
      actions[2].setAttribute('data-action', 'delete');
    }
    return el('tr', {'data-job': jb.id},
      selectable ? el('td', null, checkbox(jb.id)) : null,
      el('td', null, link(jb.id, '/job/' + enc(jb.id))),
      dead ? el('td', null, link(jb.queue, '/queue/' + enc(jb.queue) + '/waiting')) : null,
      el('td', null, jb.name),
      el('td', {class: 'num'}, jb.attempts + ' / ' + jb.max_attempts),
      el('td', null, dead ? orDash(jb.last_error && jb.last_error.message) : orDash(jb.run_at)),
      el('td', null, orDash(dead ? jb.finished_at : jb.created_at)),
      dead ? el('td', null, actions) : null);
  });
}

function pager(next, base) {
  return next ? el('p', null, link('Next page', base + '?cursor=' + enc(next))) : null;
}

function viewQueue(queue, state, cursor) {
  var q = '/v1/queues/' + enc(queue) + '/jobs?state=' + enc(state) + '&limit=50' + (cursor ? '&cursor=' + enc(cursor) : '');
  return api('GET', q).then(function (j) {
    var tabs = el('p', {class: 'tabs'}, STATES.map(function (s) {
      return el('a', {href: '#/queue/' + enc(queue) + '/' + s, class: s === state ? 'active' : null}, s);
    }));
    var cancellable = isAdmin() && (state === 'waiting' || state === 'scheduled');
    var bar = cancellable && j.jobs.length ? bulkBar([
      button('Cancel selected', function () { bulkSelected('cancel', 'Cancel'); }, 'danger'),
      button('Cancel every ' + state + ' job of ' + queue, function () {
        bulkFilter('cancel', {queue: queue, state: state}, 'Cancel every ' + state + ' job of ' + queue);
      }, 'danger')]) : null;
    return [el('h1', null, 'Queue ', queue, ': ', state), tabs, bar,
      j.jobs.length ? el('table', {id: 'jobs'},
        el('thead', null, el('tr', null, cancellable ? el('th', null, '') : null,
          el('th', null, 'Id'), el('th', null, 'Name'),
          el('th', {class: 'num'}, 'Attempts'), el('th', null, 'Run at'), el('th', null, 'Created'))),
        el('tbody', null, jobRows(j.jobs, false, cancellable)))
        : el('p', {class: 'muted'}, 'No ' + state + ' jobs.'),
      pager(j.next_cursor, '/queue/' + enc(queue) + '/' + state)];
  });
}

// A viewer's jobs carry "redacted": ["payload", "result"] (api.md).
function redacted(obj, field) {
  return Array.isArray(obj.redacted) && obj.redacted.indexOf(field) >= 0;
}

function pretty(v) {
  if (v === null || v === undefined) return '—';
  try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
}

function viewJob(id) {
  return api('GET', '/v1/jobs/' + enc(id)).then(function (j) {
    var jb = j.job;
    var facts = [['Id', jb.id], ['Queue', jb.queue], ['Name', jb.name], ['State', jb.state],
      ['Priority', jb.priority], ['Group', orDash(jb.group)],
      ['Attempts', jb.attempts + ' of ' + jb.max_attempts], ['Started', jb.started],
      ['Stalled', jb.stalled], ['Trace id', orDash(jb.trace_id)],
      ['Idempotency key', orDash(jb.idempotency_key)], ['Lease owner', orDash(jb.lease_owner)]];
    var timeline = [['Created', jb.created_at], ['Run at', jb.run_at], ['Started', jb.started_at],
      ['Lease expires', jb.lease_expires_at], ['Finished', jb.finished_at],
      ['Redriven', jb.redriven_at], ['Updated', jb.updated_at]];
    var err = jb.last_error;
    var cancel = null;
    if (isAdmin() && (jb.state === 'waiting' || jb.state === 'scheduled')) {
      cancel = button('Cancel job', function () {
        confirmAction('Cancel job ' + jb.id + '?').then(function (ok) {
          if (ok) act(api('DELETE', '/v1/jobs/' + enc(jb.id)), 'Cancelled ' + jb.id);
        });
      }, 'danger');
      cancel.setAttribute('data-action', 'cancel');
    }
    var deadActions = null;
    if (isAdmin() && jb.state === 'dead') {
      deadActions = Array.prototype.slice.call(jobRows([jb], true)[0].lastChild.childNodes);
    }
    return [el('h1', null, 'Job ', jb.id),
      el('dl', {class: 'facts', id: 'job-facts'}, facts.map(function (f) {
        return [el('dt', null, f[0]), el('dd', null, String(f[1]))];
      })),
      el('h3', null, 'Payload'),
      redacted(jb, 'payload') ? el('p', {class: 'muted', id: 'job-payload-hidden'}, 'Payload withheld from your role.')
        : el('pre', {id: 'job-payload'}, pretty(jb.payload)),
      el('h3', null, 'Last error'),
      err ? el('pre', {id: 'job-error'}, (err.class ? err.class + ': ' : '') + (err.message || '') +
        (err.detail !== undefined ? '\n' + pretty(err.detail) : ''))
        : el('p', {class: 'muted'}, 'None.'),
      !redacted(jb, 'result') && jb.result !== null && jb.result !== undefined
        ? [el('h3', null, 'Result'), el('pre', {id: 'job-result'}, pretty(jb.result))] : null,
      el('h3', null, 'Timeline'),
      el('dl', {class: 'facts', id: 'job-timeline'}, timeline.map(function (t) {
        return [el('dt', null, t[0]), el('dd', null, orDash(t[1]))];
      })),
      el('p', {id: 'job-actions'}, cancel, deadActions)];
  });
}

function viewDead(cursor, queue) {
  var q = '/v1/dead?limit=50' + (queue ? '&queue=' + enc(queue) : '') + (cursor ? '&cursor=' + enc(cursor) : '');
  return api('GET', q).then(function (j) {
    var admin = isAdmin();
    var filter = queue ? {queue: queue} : {};
    var scope = queue ? ' of queue ' + queue : '';
    var bar = admin && j.jobs.length ? bulkBar([
      button('Redrive selected', function () { bulkSelected('redrive', 'Redrive'); }),
      button('Delete selected', function () { bulkSelected('delete', 'Delete'); }, 'danger'),
      button('Redrive every dead letter' + scope, function () {
        bulkFilter('redrive', filter, 'Redrive every dead letter' + scope + ' not redriven yet');
      }),
      button('Delete every dead letter' + scope, function () {
        bulkFilter('delete', filter, 'Delete every dead letter' + scope);
      }, 'danger')]) : null;
    return [el('h1', null, 'Dead letters', scope), bar,
      j.jobs.length ? el('table', {id: 'dead'},
        el('thead', null, el('tr', null, admin ? el('th', null, '') : null,
          el('th', null, 'Id'), el('th', null, 'Queue'),
          el('th', null, 'Name'), el('th', {class: 'num'}, 'Attempts'), el('th', null, 'Last error'),
          el('th', null, 'Died'), el('th', null, ''))),
        el('tbody', null, jobRows(j.jobs, true, admin)))
        : el('p', {class: 'muted'}, 'No dead letters.'),
      pager(j.next_cursor, queue ? '/dead/' + enc(queue) : '/dead')];
  });
}

function viewSchedulers() {
  return api('GET', '/v1/schedulers?limit=200').then(function (j) {
    var rows = j.schedulers.map(function (s) {
      return el('tr', {'data-scheduler': s.key},
        el('td', null, s.key), el('td', null, s.cron), el('td', null, s.tz),
        el('td', null, s.queue), el('td', null, s.name), el('td', null, s.missed),
        el('td', null, orDash(s.last_tick)),
        el('td', null, (s.next_runs || []).slice(0, 3).map(function (t) { return el('div', null, t); })));
    });
    return [el('h1', null, 'Schedulers'),
      rows.length ? el('table', {id: 'schedulers'},
        el('thead', null, el('tr', null, el('th', null, 'Key'), el('th', null, 'Cron'),
          el('th', null, 'Time zone'), el('th', null, 'Queue'), el('th', null, 'Name'),
          el('th', null, 'Missed'), el('th', null, 'Last tick'),
          el('th', null, 'Next runs (in its zone)'))),
        el('tbody', null, rows))
        : el('p', {class: 'muted'}, 'No schedulers.'),
      pager(j.next_cursor, '/schedulers')];
  });
}

function viewLeases(cursor) {
  return api('GET', '/v1/leases?limit=100' + (cursor ? '&cursor=' + enc(cursor) : '')).then(function (j) {
    var rows = j.leases.map(function (l) {
      return el('tr', {'data-lease': l.idempotency_key},
        el('td', null, l.type), el('td', null, l.code), el('td', null, l.run_key),
        el('td', null, l.state), el('td', {class: 'num'}, l.fence),
        el('td', null, orDash(l.expires_at || l.completed_at)), el('td', null, l.updated_at));
    });
    return [el('h1', null, 'Run-once leases'),
      rows.length ? el('table', {id: 'leases'},
        el('thead', null, el('tr', null, el('th', null, 'Type'), el('th', null, 'Code'),
          el('th', null, 'Run key'), el('th', null, 'State'), el('th', {class: 'num'}, 'Fence'),
          el('th', null, 'Expires / completed'), el('th', null, 'Updated'))),
        el('tbody', null, rows))
        : el('p', {class: 'muted'}, 'No leases.'),
      pager(j.next_cursor, '/leases')];
  });
}

function viewCursors(cursor) {
  return api('GET', '/v1/cursors?limit=100' + (cursor ? '&cursor=' + enc(cursor) : '')).then(function (j) {
    var rows = j.cursors.map(function (c) {
      return el('tr', {'data-cursor': c.name}, el('td', null, c.name),
        el('td', null, el('pre', null, pretty(c.value))), el('td', null, c.updated_at));
    });
    return [el('h1', null, 'Cursors'),
      rows.length ? el('table', {id: 'cursors'},
        el('thead', null, el('tr', null, el('th', null, 'Name'), el('th', null, 'Value'),
          el('th', null, 'Updated'))),
        el('tbody', null, rows))
        : el('p', {class: 'muted'}, 'No cursors.'),
      pager(j.next_cursor, '/cursors')];
  });
}

function viewAudit(cursor) {
  return api('GET', '/v1/audit?limit=100' + (cursor ? '&cursor=' + enc(cursor) : '')).then(function (j) {
    var rows = j.entries.map(function (a) {
      return el('tr', null, el('td', null, a.at), el('td', null, a.who), el('td', null, a.action),
        el('td', null, orDash(a.target)), el('td', {class: 'num'}, a.count));
    });
    return [el('h1', null, 'Audit log'),
      el('table', {id: 'audit'},
        el('thead', null, el('tr', null, el('th', null, 'When'), el('th', null, 'Who'),
          el('th', null, 'Action'), el('th', null, 'Which'), el('th', {class: 'num'}, 'Count'))),
        el('tbody', null, rows)),
      pager(j.next_cursor, '/audit')];
  });
}

// ---- routing and refresh ----

function parseHash() {
  var h = location.hash.replace(/^#/, '') || '/queues';
  var qs = '';
  var i = h.indexOf('?');
  if (i >= 0) { qs = h.slice(i + 1); h = h.slice(0, i); }
  var cursor = new URLSearchParams(qs).get('cursor');
  var parts = h.split('/').filter(Boolean).map(decodeURIComponent);
  return {parts: parts, cursor: cursor};
}

// Each render has a number; a slower earlier one never overwrites a later.
var renderGen = 0;

function render() {
  var r = parseHash(), p = r.parts, view;
  switch (p[0]) {
    case 'queue': view = viewQueue(p[1], STATES.indexOf(p[2]) >= 0 ? p[2] : 'waiting', r.cursor); break;
    case 'job': view = viewJob(p[1]); break;
    case 'dead': view = viewDead(r.cursor, p[1]); break;
    case 'schedulers': view = viewSchedulers(); break;
    case 'leases': view = viewLeases(r.cursor); break;
    case 'cursors': view = viewCursors(r.cursor); break;
    case 'audit': view = viewAudit(r.cursor); break;
    default: p = ['queues']; view = viewQueues();
  }
  document.querySelectorAll('#nav a').forEach(function (a) {
    a.classList.toggle('active', a.getAttribute('data-view') === (p[0] === 'queue' ? 'queues' : p[0]));
  });
  var viewKey = location.hash.replace(/\?.*$/, '');
  if (viewKey !== selectedView) { selected.clear(); selectedView = viewKey; }
  var gen = ++renderGen;
  view.then(function (nodes) {
    if (gen !== renderGen) return;
    var main = document.getElementById('main');
    main.replaceChildren();
    add(main, nodes);
    main.setAttribute('data-loaded', String(gen));
    main.setAttribute('data-view', location.hash || '#/queues');
  }).catch(function (e) { if (gen === renderGen) status(e.message); });
}

// Live updates every few seconds while the tab is visible; none while hidden.
function schedule() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  if (document.visibilityState === 'visible') {
    refreshTimer = setInterval(function () {
      if (document.getElementById('confirm').hidden) render();
    }, REFRESH_MS);
  }
}

document.addEventListener('DOMContentLoaded', function () {
  fetch('/ui/session', {credentials: 'same-origin'}).then(function (r) {
    if (r.status === 401) { location.href = '/ui/login'; throw new Error('not logged in'); }
    if (!r.ok) throw new Error('HTTP ' + r.status);
    return r.json();
  }).then(function (s) {
    session = s;
    document.getElementById('who').textContent = s.open ? 'open (no tokens configured)'
      : s.role + (s.name ? ' · ' + s.name : '');
    document.getElementById('logout').hidden = !!s.open;
    if (!isAdmin()) document.getElementById('nav-audit').hidden = true;
    render();
    schedule();
  }).catch(function (e) { status(e.message); });
  window.addEventListener('hashchange', render);
  document.addEventListener('visibilitychange', function () {
    if (document.visibilityState === 'visible' && session) render();
    schedule();
  });
  document.getElementById('search').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var box = document.getElementById('search-id');
    var id = box.value.trim();
    box.value = '';
    if (id) location.hash = '#/job/' + enc(id);
  });
  document.getElementById('logout').addEventListener('click', function () {
    api('POST', '/ui/logout').catch(function () {}).then(function () { location.href = '/ui/login'; });
  });
});
