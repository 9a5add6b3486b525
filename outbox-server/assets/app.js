// The outbox dashboard: reads the API under the page's own prefix (any mount prefix works) with the token the
// operator entered, kept in session storage and sent only as a header. Live through the event stream, read
// with fetch so that the token stays out of the URL.
'use strict';

(() => {
  const TOKEN_KEY = 'outbox.token';
  const STATUSES = ['pending', 'claimed', 'completed', 'failed', 'cancelled'];
  const PAGE_SIZE = 50;
  // The router's mount prefix, ending with a slash: every API path is under it.
  const BASE = document.body.dataset.base || '';

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    role: null,
    tokens: false,
    view: null,
    stream: null,
    refreshTimer: null,
    lastRefresh: 0,
    started: false,
  };

  // ---- helpers ----

  /** An element with attributes (`class`, `text`, `on*` handlers, others as attributes) and children. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'text') node.textContent = String(value);
      else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const svg = (tag, attrs) => {
    const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === 'text') node.textContent = String(value);
      else node.setAttribute(name, String(value));
    }
    return node;
  };

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function time(text) {
    if (!text) return '';
    const d = new Date(text);
    if (Number.isNaN(d.getTime())) return String(text);
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function age(secs) {
    if (secs === null || secs === undefined) return '—';
    let s = Math.max(0, Math.round(secs));
    const parts = [];
    for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60]]) {
      if (s >= size) {
        parts.push(Math.floor(s / size) + unit);
        s %= size;
      }
    }
    if (s || parts.length === 0) parts.push(s + 's');
    return parts.slice(0, 2).join(' ');
  }

  function say(message, isError) {
    const status = document.getElementById('status');
    status.textContent = message || '';
    status.dataset.kind = isError ? 'error' : 'info';
  }

  const canOperate = () => state.role === 'operate';

  function headers(extra) {
    const h = Object.assign({ Accept: 'application/json' }, extra || {});
    if (state.token) h.Authorization = 'Bearer ' + state.token;
    return h;
  }

  /** A JSON API call; a failed one throws an Error carrying the answer's `status`, `code` and message. */
  async function api(path, options) {
    const opts = options || {};
    const init = { method: opts.method || 'GET', headers: headers(), signal: opts.signal };
    if (opts.body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.body);
    }
    const res = await fetch(BASE + path, init);
    const text = await res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      body = { message: text };
    }
    if (!res.ok) {
      const error = new Error((body && body.message) || res.statusText);
      error.status = res.status;
      error.code = body && body.code;
      throw error;
    }
    return body;
  }

  const query = (params) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    const s = q.toString();
    return s ? '?' + s : '';
  };

  function table(columns, rows, rowAttrs) {
    const head = el('tr', {}, columns.map((c) => el('th', { scope: 'col', text: c })));
    const body = rows.map((cells, i) => el('tr', rowAttrs ? rowAttrs(i) : {}, cells.map((c) => el('td', {}, c))));
    return el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, head), el('tbody', {}, body)));
  }

  const statusBadge = (status) => el('span', { class: 'badge badge-' + status, text: status });
  const jobLink = (id) => el('a', { href: '#/jobs/' + encodeURIComponent(id), class: 'mono', text: id });
  const json = (value) => el('pre', { class: 'json' }, JSON.stringify(value, null, 2));

  // ---- session ----

  async function start() {
    let session;
    try {
      session = await api('api/session');
    } catch (e) {
      render(el('p', { class: 'error', text: 'The API did not answer: ' + e.message }));
      return;
    }
    state.tokens = session.tokens;
    state.role = session.role;
    if (session.tokens && (!session.role || session.role === 'work')) {
      const why = session.token === 'invalid'
        ? 'That token is not accepted by this server.'
        : session.role === 'work'
          ? 'A work token cannot read the queue: enter a read or operate token.'
          : '';
      showLogin(why);
      return;
    }
    if (!session.role) {
      render(el('p', { class: 'error', text: 'This server answers without tokens only on a loopback address.' }));
      return;
    }
    document.getElementById('nav').hidden = false;
    document.getElementById('role').textContent = session.tokens ? session.role + ' token' : 'no tokens configured';
    document.getElementById('role').dataset.role = session.role;
    document.getElementById('signout').hidden = !session.tokens;
    route();
    // Signing in again (a token that stopped working) keeps the one listener and stream; the stream sends
    // the new token when it reconnects.
    if (!state.started) {
      state.started = true;
      window.addEventListener('hashchange', route);
      follow();
    }
  }

  function showLogin(why) {
    document.getElementById('nav').hidden = true;
    const input = el('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
    const form = el('form', { id: 'login', method: 'post', class: 'login' },
      el('h1', { text: 'Sign in' }),
      el('p', { text: 'Enter a read or operate token. It is kept for this browser tab only.' }),
      why ? el('p', { class: 'error', role: 'alert', text: why }) : null,
      el('label', { for: 'token', text: 'Token' }),
      input,
      el('button', { type: 'submit', text: 'Sign in' }));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      state.token = input.value.trim();
      sessionStorage.setItem(TOKEN_KEY, state.token);
      start();
    });
    render(form);
    input.focus();
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    if (state.stream) state.stream.abort();
    location.reload();
  }

  // ---- live updates ----

  /** Reads the event stream; every event asks the page on view to refresh (at most once a second). */
  async function follow() {
    const control = new AbortController();
    state.stream = control;
    const live = document.getElementById('live');
    let last = null;
    while (!control.signal.aborted) {
      try {
        const h = headers({ Accept: 'text/event-stream' });
        if (last) h['Last-Event-ID'] = last;
        const res = await fetch(BASE + 'api/events', { headers: h, signal: control.signal });
        if (!res.ok || !res.body) throw new Error('the event stream answered ' + res.status);
        live.textContent = 'live';
        live.dataset.live = 'on';
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, '\n');
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = {};
            for (const line of block.split('\n')) {
              const colon = line.indexOf(':');
              if (colon <= 0) continue;
              const field = line.slice(0, colon);
              const data = line.slice(colon + 1).replace(/^ /, '');
              if (field === 'id') event.id = data;
              else if (field === 'data') event.data = (event.data ? event.data + '\n' : '') + data;
            }
            if (event.id) last = event.id;
            if (event.data) changed(JSON.parse(event.data));
          }
        }
      } catch (_) {
        if (control.signal.aborted) return;
      }
      live.textContent = 'reconnecting';
      live.dataset.live = 'off';
      await sleep(2000);
    }
  }

  function changed(event) {
    const view = state.view;
    if (!view || !view.refresh || (view.wants && !view.wants(event))) return;
    if (state.refreshTimer) return;
    const wait = Math.max(0, 1000 - (Date.now() - state.lastRefresh));
    state.refreshTimer = setTimeout(() => {
      state.refreshTimer = null;
      state.lastRefresh = Date.now();
      if (state.view === view) view.refresh().catch(failed);
    }, wait);
  }

  function failed(e) {
    if (e && e.name === 'AbortError') return;
    if (e && e.status === 401) {
      showLogin('The token is no longer accepted.');
      return;
    }
    say(e && e.message ? e.message : String(e), true);
  }

  // ---- routing ----

  function render(...nodes) {
    const main = document.getElementById('view');
    main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
  }

  function route() {
    const hash = location.hash || '#/';
    if (!hash.startsWith('#/')) {
      if (!state.view) location.replace('#/');
      return;
    }
    const [path, search] = hash.slice(1).split('?');
    const params = Object.fromEntries(new URLSearchParams(search || ''));
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    let view;
    if (parts.length === 0) view = overview();
    else if (parts[0] === 'jobs' && parts.length === 1) view = jobs(params);
    else if (parts[0] === 'jobs' && parts.length === 2) view = job(parts[1]);
    else if (parts[0] === 'failures') view = failures();
    else if (parts[0] === 'kinds') view = kinds();
    else if (parts[0] === 'flow') view = flowPage();
    else if (parts[0] === 'workflows' && parts.length === 2) view = workflowPage(parts[1]);
    else view = { page: null, title: 'Not found', refresh: async () => render(el('h1', { text: 'No such page' })) };
    for (const link of document.querySelectorAll('#nav a')) {
      if (link.dataset.page === view.page) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    document.title = view.title + ' · outbox';
    state.view = view;
    say('');
    view.refresh().catch(failed);
  }

  // ---- overview ----

  function overview() {
    const view = { page: 'overview', title: 'Overview' };
    view.refresh = async () => {
      const [stats, queues, activity, workers, health] = await Promise.all([
        api('api/stats?window=1h'), api('api/queues'), api('api/activity?window=1h&bucket=1m'),
        api('api/workers'), api('api/health').catch((e) => ({ status: 'unhealthy', error: e.message })),
      ]);
      if (state.view !== view) return;
      const totals = Object.fromEntries(STATUSES.map((s) => [s, 0]));
      for (const c of stats.counts) totals[c.status] = (totals[c.status] || 0) + c.count;
      const card = (label, value, key) => el('div', { class: 'card' },
        el('span', { class: 'card-label', text: label }),
        el('span', { class: 'card-value', 'data-count': key, text: value }));
      const stuck = queues.queues.reduce((n, q) => n + q.stuck, 0);
      render(
        el('h1', { text: 'Overview' }),
        el('section', { class: 'cards', 'aria-label': 'Jobs by status' },
          STATUSES.map((s) => card(s[0].toUpperCase() + s.slice(1), totals[s], s)),
          card('Oldest pending', age(health.oldest_pending_age_secs), 'oldest-pending'),
          card('Stuck claims', stuck, 'stuck'),
          card('Blocked sequences', stats.blocked_sequences, 'blocked'),
          card('Live workers', workers.workers.length, 'workers')),
        el('section', { 'aria-labelledby': 'activity-h' },
          el('h2', { id: 'activity-h', text: 'Completed and failed per minute, last hour' }),
          chart(activity.points)),
        el('section', { 'aria-labelledby': 'queues-h' },
          el('h2', { id: 'queues-h', text: 'Queues' }),
          queues.queues.length === 0 ? el('p', { text: 'No jobs yet.' }) : table(
            ['Queue', 'Available', 'Scheduled', 'Waiting', 'Claimed', 'Stuck', 'Completed', 'Failed', 'Cancelled'],
            queues.queues.map((q) => [
              el('a', { href: '#/jobs' + query({ queue: q.queue }), text: q.queue }),
              q.available, q.scheduled, q.waiting, q.claimed, q.stuck, q.completed, q.failed, q.cancelled,
            ]),
            (i) => ({ 'data-queue': queues.queues[i].queue }))),
        stats.stuck.length === 0 ? null : el('section', { 'aria-labelledby': 'stuck-h' },
          el('h2', { id: 'stuck-h', text: 'Stuck claims' }),
          table(['Job', 'Kind', 'Worker', 'Lease ran out'],
            stats.stuck.map((j) => [jobLink(j.id), j.kind, j.locked_by || '', time(j.lease_expires_at)]))),
        stats.blocked.length === 0 ? null : el('section', { 'aria-labelledby': 'blocked-h' },
          el('h2', { id: 'blocked-h', text: 'Blocked sequences' }),
          table(['Sequence', 'Held by', 'Status', 'Waiting'],
            stats.blocked.map((b) => [b.sequence_key, jobLink(b.head.id), statusBadge(b.head.status), b.waiting]))),
        el('section', { 'aria-labelledby': 'workers-h' },
          el('h2', { id: 'workers-h', text: 'Live workers' }),
          workers.workers.length === 0 ? el('p', { text: 'No worker is heartbeating.' }) : table(
            ['Worker', 'Host', 'Kinds', 'Queues', 'Running', 'Last seen'],
            workers.workers.map((w) => [
              el('span', { class: 'mono', text: w.id }), w.host, (w.kinds || []).join(', '),
              w.queues ? w.queues.join(', ') : 'all', w.running, time(w.last_seen_at),
            ]))));
    };
    return view;
  }

  /** Bars of completed (up) and failed (down) jobs per bucket, as SVG. */
  function chart(points) {
    const width = 720;
    const height = 180;
    const mid = 120;
    const top = Math.max(1, ...points.map((p) => p.completed));
    const bottom = Math.max(1, ...points.map((p) => p.failed));
    const step = width / Math.max(1, points.length);
    const completed = points.reduce((n, p) => n + p.completed, 0);
    const failedJobs = points.reduce((n, p) => n + p.failed, 0);
    const root = svg('svg', {
      viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', preserveAspectRatio: 'none',
      'aria-label': `${completed} completed and ${failedJobs} failed in the last hour`,
    });
    root.append(svg('line', { x1: 0, x2: width, y1: mid, y2: mid, class: 'axis' }));
    points.forEach((p, i) => {
      const x = i * step + 1;
      const w = Math.max(1, step - 2);
      if (p.completed) {
        const h = (p.completed / top) * (mid - 14);
        const bar = svg('rect', { x, y: mid - h, width: w, height: h, class: 'bar-completed' });
        bar.append(svg('title', { text: `${time(p.at)}: ${p.completed} completed` }));
        root.append(bar);
      }
      if (p.failed) {
        const h = (p.failed / bottom) * (height - mid - 4);
        const bar = svg('rect', { x, y: mid, width: w, height: h, class: 'bar-failed' });
        bar.append(svg('title', { text: `${time(p.at)}: ${p.failed} failed` }));
        root.append(bar);
      }
    });
    return el('figure', { class: 'chart-wrap' }, root,
      el('figcaption', {},
        el('span', { class: 'key key-completed', text: `${completed} completed (up to ${top} a minute)` }), ' · ',
        el('span', { class: 'key key-failed', text: `${failedJobs} failed (up to ${bottom} a minute)` }),
        ' in the last hour, one bar a minute'));
  }

  // ---- jobs ----

  function jobs(params) {
    const view = { page: 'jobs', title: 'Jobs' };
    const filters = {
      status: params.status || '', kind: params.kind || '', queue: params.queue || '',
      since: params.since || '', key: params.key || '', subject: params.subject || '',
    };
    const go = (extra) => { location.hash = '#/jobs' + query(Object.assign({}, filters, extra || {})); };
    let form = null;
    let results = null;
    const build = (kindNames, queueNames) => {
      const select = (name, label, options) => [
        el('label', { for: 'f-' + name, text: label }),
        el('select', { id: 'f-' + name, name, onchange: (e) => { filters[name] = e.target.value; go(); } },
          el('option', { value: '', text: 'any' }),
          options.map((o) => el('option', { value: o, selected: o === filters[name], text: o }))),
      ];
      const input = (name, label, placeholder) => [
        el('label', { for: 'f-' + name, text: label }),
        el('input', { id: 'f-' + name, name, value: filters[name], placeholder, autocomplete: 'off' }),
      ];
      form = el('form', { class: 'filters', method: 'post', 'aria-label': 'Filter jobs' },
        el('div', {}, select('status', 'Status', STATUSES)),
        el('div', {}, select('kind', 'Kind', kindNames)),
        el('div', {}, select('queue', 'Queue', queueNames)),
        el('div', {}, input('since', 'Since', 'e.g. 1h')),
        el('div', {}, input('key', 'Key', 'idempotency key')),
        el('div', {}, input('subject', 'Subject', 'e.g. order:42')),
        el('div', { class: 'filter-actions' },
          el('button', { type: 'submit', text: 'Apply' }),
          el('button', { type: 'button', text: 'Clear', onclick: () => { location.hash = '#/jobs'; } })));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        filters.since = form.elements.since.value.trim();
        filters.key = form.elements.key.value.trim();
        filters.subject = form.elements.subject.value.trim();
        go();
      });
      results = el('div', { id: 'results' });
      render(el('h1', { text: 'Jobs' }), form, subjectActions(), results);
    };
    // A subject's jobs act together: cancel what has not started, retry what failed or was cancelled.
    const subjectActions = () => {
      if (!filters.subject || !canOperate()) return null;
      const act = async (action, done) => {
        try {
          const answer = await api('api/jobs/' + action, { method: 'POST', body: { subject: filters.subject } });
          const n = action === 'cancel-subject' ? answer.cancelled : answer.retried;
          say(`${done} ${n} ${n === 1 ? 'job' : 'jobs'} of ${filters.subject}.`);
          await view.refresh();
        } catch (e) {
          failed(e);
        }
      };
      return el('p', { class: 'actions', id: 'subject-actions' },
        el('button', { id: 'cancel-subject', type: 'button', text: 'Cancel pending jobs of this subject',
          onclick: () => act('cancel-subject', 'Cancelled') }),
        el('button', { id: 'retry-subject', type: 'button', text: 'Retry failed or cancelled jobs of this subject',
          onclick: () => act('retry-subject', 'Retried') }));
    };
    view.refresh = async () => {
      const request = api('api/jobs' + query(Object.assign({ limit: PAGE_SIZE, before: params.before }, filters)));
      if (!form) {
        const [kindList, queueList] = await Promise.all([api('api/kinds'), api('api/queues')]);
        if (state.view !== view) return;
        const queueNames = new Set(queueList.queues.map((q) => q.queue));
        for (const k of kindList.kinds) queueNames.add(k.options.queue);
        build(kindList.kinds.map((k) => k.name), [...queueNames].sort());
      }
      let page;
      try {
        page = await request;
      } catch (e) {
        if (e.status === 400 && state.view === view) {
          results.replaceChildren(el('p', { class: 'error', role: 'alert', text: e.message }));
          return;
        }
        throw e;
      }
      if (state.view !== view) return;
      const rows = page.jobs.map((j) => [
        jobLink(j.id), j.kind, j.queue, statusBadge(j.status), `${j.attempts}/${j.max_attempts}`,
        time(j.run_at), time(j.updated_at),
      ]);
      const pager = el('nav', { class: 'pager', 'aria-label': 'Pages of jobs' },
        params.before ? el('a', { href: '#/jobs' + query(filters), text: '← Newest' }) : null,
        page.next ? el('a', { href: '#/jobs' + query(Object.assign({}, filters, { before: page.next })), text: 'Older →' }) : null);
      results.replaceChildren(
        page.jobs.length === 0
          ? el('p', { text: 'No job matches.' })
          : table(['Job', 'Kind', 'Queue', 'Status', 'Attempts', 'Runs at', 'Updated'], rows,
            (i) => ({ 'data-job-id': page.jobs[i].id, 'data-status': page.jobs[i].status, 'data-kind': page.jobs[i].kind })),
        pager);
    };
    return view;
  }

  // ---- one job ----

  function job(id) {
    const view = { page: 'jobs', title: 'Job ' + id, wants: (e) => e.job_id === id };
    const act = async (action, done) => {
      try {
        await api('api/jobs/' + encodeURIComponent(id) + '/' + action, { method: 'POST' });
        say(done);
        await view.refresh();
      } catch (e) {
        failed(e);
      }
    };
    view.refresh = async () => {
      const { job: j, history, workflow, step, parents, children } = await api('api/jobs/' + encodeURIComponent(id));
      if (state.view !== view) return;
      const field = (label, value) => [el('dt', { text: label }), el('dd', {}, value === null || value === undefined || value === '' ? '—' : value)];
      const actions = [];
      if (canOperate() && (j.status === 'failed' || j.status === 'cancelled')) {
        actions.push(el('button', { id: 'retry', type: 'button', text: 'Retry', onclick: () => act('retry', 'Job retried: it is pending again.') }));
      }
      if (canOperate() && j.status === 'pending') {
        actions.push(el('button', { id: 'cancel', type: 'button', text: 'Cancel', onclick: () => act('cancel', 'Job cancelled.') }));
      }
      render(
        el('p', {}, el('a', { href: '#/jobs', text: '← Jobs' })),
        el('h1', {}, 'Job ', el('span', { class: 'mono', text: j.id })),
        el('p', { class: 'job-status' }, statusBadge(j.status), actions.length ? el('span', { class: 'actions' }, actions) : null),
        el('dl', { class: 'fields' },
          field('Kind', j.kind), field('Queue', j.queue), field('Status', j.status), field('Priority', j.priority),
          field('Attempts', `${j.attempts} of ${j.max_attempts}`), field('Runs at', time(j.run_at)),
          field('Enqueued', time(j.created_at)), field('Updated', time(j.updated_at)),
          field('Worker', j.locked_by), field('Lease until', time(j.lease_expires_at)),
          field('Key', j.idempotency_key), field('Sequence', j.sequence_key),
          field('Subject', j.subject ? el('a', { href: '#/jobs' + query({ subject: j.subject }), text: j.subject }) : null),
          field('Trace', j.trace ? el('span', { class: 'mono', text: j.trace }) : null),
          j.waiting_for ? field('Waiting for', jobLink(j.waiting_for)) : null),
        j.last_error ? el('section', { 'aria-labelledby': 'error-h' },
          el('h2', { id: 'error-h', text: 'Last error' }), el('pre', { class: 'error-text', text: j.last_error })) : null,
        workflow ? el('section', { 'aria-labelledby': 'workflow-h', id: 'workflow-links' },
          el('h2', { id: 'workflow-h' }, 'Step ', el('strong', { text: step }), ' of ',
            el('a', { href: '#/workflows/' + encodeURIComponent(workflow), class: 'mono', text: workflow })),
          links('Waits for', parents, j.status === 'pending'), links('Waited for by', children, false)) : null,
        el('section', { 'aria-labelledby': 'payload-h' }, el('h2', { id: 'payload-h', text: 'Payload' }), json(j.payload)),
        j.output === null || j.output === undefined ? null
          : el('section', { 'aria-labelledby': 'output-h' }, el('h2', { id: 'output-h', text: 'Output' }), json(j.output)),
        el('section', { 'aria-labelledby': 'history-h' },
          el('h2', { id: 'history-h', text: 'History' }),
          el('ol', { class: 'timeline', id: 'history' }, history.map((h) => el('li', { 'data-event': h.event },
            el('time', { datetime: h.at, text: time(h.at) }), ' ',
            el('strong', { text: h.event.replace(/_/g, ' ') }),
            ` · attempt ${h.attempt}`, h.worker ? ` · ${h.worker}` : '',
            h.error ? el('pre', { class: 'error-text', text: h.error }) : null)))));
    };
    return view;
  }

  /** A step's parents or children: each one's step name, status and job; `open` marks the parents not counted yet. */
  function links(title, list, open) {
    if (!list || list.length === 0) return null;
    return el('div', { class: 'links', 'data-links': title },
      el('h3', { text: title }),
      el('ul', {}, list.map((p) => el('li', { 'data-step': p.step },
        el('strong', { text: p.step }), ' ', statusBadge(p.status || 'gone'), ' ', jobLink(p.id),
        open && !p.counted ? ' · waiting for it' : ''))));
  }

  // ---- one workflow ----

  /** A workflow's steps in columns by depth (a step is one column right of its deepest parent), its edges as lines. */
  function workflowPage(id) {
    // Any event may be one of its steps' (a worker's claim lists its jobs in one event): it refreshes at most once
    // a second.
    const view = { page: null, title: 'Workflow ' + id, wants: () => true };
    view.refresh = async () => {
      const g = await api('api/workflows/' + encodeURIComponent(id));
      if (state.view !== view) return;
      const byId = new Map(g.steps.map((s) => [s.id, s]));
      const depth = new Map();
      const depthOf = (s, seen) => {
        if (depth.has(s.id)) return depth.get(s.id);
        if (seen.has(s.id)) return 0;
        seen.add(s.id);
        const inside = s.parents.map((p) => byId.get(p)).filter(Boolean);
        const d = inside.length ? 1 + Math.max(...inside.map((p) => depthOf(p, seen))) : 0;
        depth.set(s.id, d);
        return d;
      };
      const columns = [];
      for (const s of g.steps) {
        const d = depthOf(s, new Set());
        (columns[d] = columns[d] || []).push(s);
      }
      const [w, h, gapX, gapY] = [170, 46, 60, 18];
      const at = new Map();
      columns.forEach((col, x) => col.forEach((s, y) => at.set(s.id, { x: 10 + x * (w + gapX), y: 10 + y * (h + gapY) })));
      const width = 20 + columns.length * (w + gapX) - gapX;
      const height = 20 + Math.max(1, ...columns.map((c) => c.length)) * (h + gapY) - gapY;
      const picture = svg('svg', { id: 'workflow-graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
        'aria-label': `The steps of workflow ${g.name} and what each waits for` });
      for (const s of g.steps) {
        for (const p of s.parents) {
          const [from, to] = [at.get(p), at.get(s.id)];
          if (!from || !to) continue;
          picture.append(svg('line', { class: 'edge', 'data-edge': `${byId.get(p).step}→${s.step}`,
            x1: from.x + w, y1: from.y + h / 2, x2: to.x, y2: to.y + h / 2 }));
        }
      }
      for (const s of g.steps) {
        const { x, y } = at.get(s.id);
        const node = svg('a', { href: '#/jobs/' + encodeURIComponent(s.id) });
        const box = svg('g', { class: 'step state-' + s.state, 'data-step': s.step, 'data-state': s.state });
        box.append(svg('rect', { x, y, width: w, height: h, rx: 6 }),
          svg('text', { x: x + 8, y: y + 18, class: 'step-name', text: s.step }),
          svg('text', { x: x + 8, y: y + 36, class: 'step-state', text: `${s.state} · ${s.kind}` }));
        node.append(box);
        picture.append(node);
      }
      const cancel = async () => {
        try {
          const answer = await api('api/workflows/' + encodeURIComponent(id) + '/cancel', { method: 'POST' });
          say(`Cancelled ${answer.cancelled} ${answer.cancelled === 1 ? 'step' : 'steps'} of ${g.name}.`);
          await view.refresh();
        } catch (e) {
          failed(e);
        }
      };
      render(
        el('h1', {}, 'Workflow ', el('span', { text: g.name })),
        el('p', {}, statusBadge(g.state), ' ', el('span', { class: 'mono', text: g.id }), ' · enqueued ', time(g.created_at),
          canOperate() && g.state === 'running'
            ? el('span', { class: 'actions' }, el('button', { id: 'cancel-workflow', type: 'button', text: 'Cancel the steps not started', onclick: cancel }))
            : null),
        el('div', { class: 'graph' }, picture),
        table(['Step', 'Kind', 'State', 'Waits for', 'Job', 'Last error'], g.steps.map((s) => [
          s.step, s.kind, statusBadge(s.state), s.parents.map((p) => (byId.get(p) || { step: p }).step).join(', ') || '—',
          jobLink(s.id), s.last_error || '—'])));
    };
    return view;
  }

  // ---- failures ----

  function failures() {
    const view = { page: 'failures', title: 'Failures' };
    const retry = async (body, what) => {
      try {
        const answer = await api('api/jobs/retry-failed', { method: 'POST', body });
        say(`Retried ${answer.retried} ${answer.retried === 1 ? 'job' : 'jobs'} ${what}.`);
        await view.refresh();
      } catch (e) {
        failed(e);
      }
    };
    view.refresh = async () => {
      const { groups } = await api('api/failures?limit=200');
      if (state.view !== view) return;
      const byKind = new Map();
      for (const g of groups) {
        if (!byKind.has(g.kind)) byKind.set(g.kind, []);
        byKind.get(g.kind).push(g);
      }
      const sections = [...byKind.entries()].map(([kind, list]) => {
        const total = list.reduce((n, g) => n + g.count, 0);
        return el('section', { class: 'failure-kind', 'data-kind': kind },
          el('h2', {}, kind, ' ', el('span', { class: 'count', text: `(${total} failed)` })),
          canOperate() ? el('button', { type: 'button', class: 'retry-kind', text: `Retry all failed ${kind}`, onclick: () => retry({ kind }, `of ${kind}`) }) : null,
          table(['Error', 'Jobs', 'Latest', ''].slice(0, canOperate() ? 4 : 3), list.map((g) => [
            el('pre', { class: 'error-text', text: g.error === null ? '(no error recorded)' : g.error }),
            g.count,
            el('span', {}, jobLink(g.latest_id), el('br'), time(g.latest_at)),
            // A group without an error has nothing to match on; the kind's button retries it.
            canOperate() && g.error !== null
              ? el('button', { type: 'button', class: 'retry-group', text: `Retry ${g.count}`, onclick: () => retry({ kind, error: g.error }, `of ${kind} failed with this error`) })
              : '',
          ].slice(0, canOperate() ? 4 : 3))));
      });
      render(el('h1', { text: 'Failures' }), sections.length ? sections : el('p', { text: 'No failed jobs.' }));
    };
    return view;
  }

  // ---- kinds ----

  function kinds() {
    const view = { page: 'kinds', title: 'Kinds', wants: () => false };
    view.refresh = async () => {
      const [{ kinds: list }, stats] = await Promise.all([api('api/kinds'), api('api/stats?window=1h')]);
      const docs = await Promise.all(list.map((k) => api('api/kinds/' + encodeURIComponent(k.name))));
      if (state.view !== view) return;
      const count = (kind, status) => stats.counts.filter((c) => c.kind === kind && c.status === status).reduce((n, c) => n + c.count, 0);
      render(el('h1', { text: 'Kinds' }), list.length === 0 ? el('p', { text: 'No kinds are known yet.' }) : docs.map((k) => {
        const failedJobs = count(k.name, 'failed');
        const finished = failedJobs + count(k.name, 'completed');
        const rate = finished ? `${((100 * failedJobs) / finished).toFixed(1)}% (${failedJobs} of ${finished} finished)` : 'none finished';
        const o = k.options;
        const option = (label, value) => [el('dt', { text: label }), el('dd', { text: value === null || value === undefined || value === '' ? '—' : value })];
        return el('section', { class: 'kind', 'data-kind': k.name },
          el('h2', { class: 'mono', text: k.name }),
          el('dl', { class: 'fields' },
            option('Queue', o.queue), option('Priority', o.priority), option('Max attempts', o.max_attempts),
            option('Unique', o.unique ? 'yes' : 'no'), option('Key fields', (o.key_fields || []).join(', ')),
            option('Sequence', o.sequence), option('Concurrency', o.concurrency),
            option('Rate', o.rate ? (o.rate_per_key ? `${o.rate} per ${o.flow_key}` : o.rate) : null),
            option('Fair share', o.fair ? `by ${o.flow_key}` : null),
            option('Failure rate', rate), option('Source', k.source)),
          el('details', {}, el('summary', { text: 'Payload schema' }), json(k.schema)));
      }));
    };
    return view;
  }

  // ---- flow control ----

  function describeTarget(t) {
    if (t.scope === 'queue') return `queue ${t.name}`;
    return t.key ? `key ${t.key} of kind ${t.name}` : `kind ${t.name}`;
  }

  function flowPage() {
    const view = { page: 'flow', title: 'Flow' };
    const act = async (path, body, done) => {
      try {
        await api(path, { method: 'POST', body });
        say(done);
        await view.refresh();
      } catch (e) {
        failed(e);
      }
    };
    const pauseForm = () => {
      const scope = el('select', { id: 'pause-scope', 'aria-label': 'What to pause' },
        el('option', { value: 'queue', text: 'Queue' }), el('option', { value: 'kind', text: 'Kind' }));
      const name = el('input', { id: 'pause-name', 'aria-label': 'Name', placeholder: 'name', required: true });
      const key = el('input', { id: 'pause-key', 'aria-label': 'Key of the kind (optional)', placeholder: 'key (optional)' });
      const reason = el('input', { id: 'pause-reason', 'aria-label': 'Reason', placeholder: 'reason' });
      const hold = el('input', { id: 'pause-for', 'aria-label': 'Hold for (optional)', placeholder: 'for, e.g. 30s (optional)' });
      const form = el('form', { id: 'pause-form', class: 'filters' }, scope, name, key, reason, hold,
        el('button', { type: 'submit', text: 'Pause' }));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const target = { scope: scope.value, name: name.value };
        if (scope.value === 'kind' && key.value) target.key = key.value;
        const body = { target };
        if (reason.value) body.reason = reason.value;
        if (hold.value) body.for = hold.value;
        act('api/flow/pause', body, `Paused ${describeTarget(target)}.`);
      });
      return form;
    };
    view.refresh = async () => {
      const [{ paused, rates }, { kinds: list }] = await Promise.all([api('api/flow'), api('api/kinds')]);
      const fair = list.filter((k) => k.options.fair);
      const shares = await Promise.all(fair.map((k) => api('api/flow/shares/' + encodeURIComponent(k.name))));
      if (state.view !== view) return;
      const pausedRows = paused.map((p) => [
        el('span', { class: 'pause-target', text: describeTarget(p.target) }),
        p.until ? time(p.until) : 'when resumed',
        time(p.since),
        p.reason || '',
        canOperate() ? el('button', { type: 'button', class: 'resume', text: 'Resume', onclick: () => act('api/flow/resume', { target: p.target }, `Resumed ${describeTarget(p.target)}.`) }) : '',
      ].slice(0, canOperate() ? 5 : 4));
      render(
        el('h1', { text: 'Flow' }),
        el('section', { id: 'paused' }, el('h2', { text: 'Paused and held' }),
          paused.length ? table(['What', 'Ends', 'Since', 'Reason', ''].slice(0, canOperate() ? 5 : 4), pausedRows) : el('p', { text: 'Nothing is paused.' }),
          canOperate() ? pauseForm() : null),
        el('section', { id: 'rates' }, el('h2', { text: 'Rates' }),
          rates.length ? table(['Name', 'Key', 'Rate', 'Available'], rates.map((r) => [r.name, r.key || '—', r.rate, `${Math.max(0, r.available).toFixed(1)} of ${r.burst}`])) : el('p', { text: 'No rate is recorded.' })),
        shares.map((s) => el('section', { class: 'fair', 'data-kind': s.kind }, el('h2', { text: `Fair share of ${s.kind}` }),
          s.shares.length ? table(['Key', 'Weight', 'Backlog', 'Running', 'Share'], s.shares.map((k) => [k.key, k.weight, k.backlog, k.running, `${Math.round(k.share * 100)}%`])) : el('p', { text: 'No key has jobs.' }))),
      );
    };
    return view;
  }

  document.getElementById('signout').addEventListener('click', signOut);
  start();
})();
