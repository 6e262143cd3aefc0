// latchkey's operator console: what exists in the key's namespace, who
// holds it, since when and until when, and who waits (the book's "The
// console" (docs/src/console.md)). Plain JavaScript, served by latchkey
// itself; no build step.
//
// Every value shown comes from the API and is put on the page as text
// (textContent, attributes), never parsed as HTML: owner labels and names
// are anyone's text. The page's Content-Security-Policy allows scripts
// and styles from this origin only.
'use strict';

(() => {
  /// Where the API key is kept: this tab's sessionStorage only.
  const KEY_STORAGE = 'latchkey-console-api-key';
  /// The least time between two refreshes' starts.
  const REFRESH_MS = 1000;
  /// Objects asked for per listing request, and requests per kind per
  /// refresh: a namespace with more shows the first ones and says so.
  const PAGE_LIMIT = 200;
  const MAX_PAGES = 5;
  /// How often leases and "held for" times are redrawn between refreshes.
  const TICK_MS = 100;

  /// The API's base: the console is served at <base>/console.
  const apiBase = new URL('.', document.baseURI);

  /// The kinds of objects, in the order shown. `admin` is the admin action
  /// (the book's "API keys and namespaces" (docs/src/api-keys.md)): its
  /// label, what the confirmation says, and whether it applies to an item.
  const KINDS = [
    { kind: 'locks', title: 'Locks', noun: 'lock', state: lockState, held: isHeld,
      admin: { label: 'Force unlock', verb: 'Force unlock', effect: 'Every holder loses it at once; a holder that goes on working no longer has the lock.' } },
    { kind: 'fair-locks', title: 'Fair locks', noun: 'fair lock', state: lockState, held: isHeld,
      admin: { label: 'Force unlock', verb: 'Force unlock', effect: 'Every holder loses it at once; the next waiter in the queue may be granted it.' } },
    { kind: 'rwlocks', title: 'Read-write locks', noun: 'read-write lock', state: rwlockState, held: isHeld,
      admin: { label: 'Force unlock', verb: 'Force unlock', effect: 'Every reader and writer loses it at once.' } },
    { kind: 'semaphores', title: 'Semaphores', noun: 'semaphore', state: semaphoreState,
      admin: { label: 'Delete', verb: 'Delete', effect: 'Its configuration, every hold and its queue are dropped.' } },
    { kind: 'latches', title: 'Latches', noun: 'latch', state: latchState,
      admin: { label: 'Delete', verb: 'Delete', effect: 'A deleted latch is open: every waiter is released.' } },
    { kind: 'redlocks', title: 'RedLocks', noun: 'RedLock', state: redlockState },
    { kind: 'rate-limiters', title: 'Rate limiters', noun: 'rate limiter', state: rateLimiterState,
      admin: { label: 'Delete', verb: 'Delete', effect: 'Its configuration is dropped; waiters are answered 404.' } },
    { kind: 'sessions', title: 'Sessions', noun: 'session', sessions: true },
  ];

  const $ = (id) => document.getElementById(id);
  const view = {
    who: null, // {namespace, role} from GET /whoami, or null when unknown
    identified: false, // whether GET /whoami was asked with the current key
    timer: null,
    inFlight: false,
    again: false, // a refresh was asked for while one was running
    lastStart: -Infinity,
    needKey: false,
    sections: new Map(),
  };

  /// A 401: the key is missing or refused.
  class NeedKey extends Error {}

  // ---- small DOM helpers (text only) ----

  /// An element with a class and children (strings become text nodes).
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /// "12.3 s", "4 min 05 s", "2 h 03 min".
  function duration(ms) {
    if (!Number.isFinite(ms)) return '–';
    const clamped = Math.max(0, ms);
    if (clamped < 60_000) return `${(clamped / 1000).toFixed(1)} s`;
    const seconds = Math.floor(clamped / 1000);
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, '0')} s`;
    return `${Math.floor(seconds / 3600)} h ${String(Math.floor(seconds / 60) % 60).padStart(2, '0')} min`;
  }

  /// A time that counts down to 0 between refreshes: `ms` as of `at`
  /// (performance.now() when the answer came).
  function countdown(ms, at) {
    const node = el('span', 'countdown', duration(ms));
    node.dataset.deadline = String(at + ms);
    return node;
  }

  /// A time that counts up between refreshes: `ms` ago as of `at`.
  function countup(ms, at) {
    const node = el('span', 'countup', duration(ms));
    node.dataset.since = String(at - ms);
    return node;
  }

  function tick() {
    if (document.hidden) return;
    const now = performance.now();
    for (const node of document.querySelectorAll('[data-deadline]')) {
      node.textContent = duration(Number(node.dataset.deadline) - now);
    }
    for (const node of document.querySelectorAll('[data-since]')) {
      node.textContent = duration(now - Number(node.dataset.since));
    }
  }

  // ---- the API ----

  /// One call to the API with the tab's key; the parsed body (or null).
  async function api(method, path) {
    const headers = { Accept: 'application/json' };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(new URL(path, apiBase), {
      method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error',
    });
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = null;
    }
    if (response.status === 401) throw new NeedKey(body?.detail ?? 'unauthorized');
    return { status: response.status, body, at: performance.now() };
  }

  /// What a problem answer says, for a message.
  function problemText(answer) {
    const body = answer.body;
    if (body && typeof body === 'object' && (body.title || body.detail)) {
      return `${answer.status} ${body.title ?? ''}${body.detail ? `: ${body.detail}` : ''}`;
    }
    return `HTTP ${answer.status}`;
  }

  /// Up to MAX_PAGES pages of one kind's listing.
  async function list(kind, prefix) {
    const items = [];
    let cursor = null;
    for (let page = 0; page < MAX_PAGES; page++) {
      const query = new URLSearchParams({ limit: String(PAGE_LIMIT) });
      if (prefix && kind !== 'sessions') query.set('prefix', prefix);
      if (cursor) query.set('cursor', cursor);
      const answer = await api('GET', `${kind}?${query}`);
      if (answer.status !== 200 || !Array.isArray(answer.body?.items)) {
        return { items, error: problemText(answer) };
      }
      for (const item of answer.body.items) items.push({ item, at: answer.at });
      cursor = answer.body.cursor ?? null;
      if (!cursor) return { items, more: false };
    }
    return { items, more: true };
  }

  // ---- what each kind shows ----

  function isHeld(item) {
    return item.locked === true || (item.mode && item.mode !== 'none' && item.mode !== null)
      || (Array.isArray(item.holds) && item.holds.length > 0);
  }

  function lockState(item) {
    if (!item.locked) return ['free'];
    return [`held ×${item.hold_count ?? 1}`];
  }

  function rwlockState(item) {
    const mode = item.mode ?? 'none';
    if (mode === 'read') return [`read by ${item.readers ?? '?'}`];
    if (mode === 'write') return [`written ×${item.writer_hold_count ?? 1}`];
    return ['free'];
  }

  function semaphoreState(item) {
    return [el('span', 'permits', `${item.available ?? '?'} / ${item.permits ?? '?'} permits available`)];
  }

  function latchState(item) {
    return [item.open ? 'open' : el('span', 'count', `count ${item.count}`)];
  }

  function redlockState(item) {
    return [`held on ${item.locked_on ?? '?'} / ${item.total ?? '?'} nodes`];
  }

  function rateLimiterState(item) {
    return [
      el('span', 'available', `${item.available ?? '?'} / ${item.burst ?? '?'} available`),
      el('span', 'rate', `${item.rate} per ${duration(item.per_ms)}`),
    ];
  }

  /// What one hold holds, in a few words.
  function holdAmount(hold) {
    const parts = [];
    if (hold.mode) parts.push(hold.mode);
    if (hold.permits !== undefined) parts.push(`${hold.permits} permit${hold.permits === 1 ? '' : 's'}`);
    if (hold.hold_count !== undefined) parts.push(`×${hold.hold_count}`);
    return parts.join(' ');
  }

  /// The holders of an item: each with its owner, what it holds, its lease
  /// counting down, how long it has been held, and whether it is in a
  /// session.
  function holdsCell(item, at) {
    const cell = el('td', 'holds');
    if (Array.isArray(item.holds)) {
      for (const hold of item.holds) {
        const owner = hold.owner === null || hold.owner === undefined
          ? el('span', 'owner none', 'no owner')
          : el('span', 'owner', hold.owner);
        const row = el('div', 'hold',
          owner,
          el('span', 'amount', holdAmount(hold)),
          el('span', 'lease', 'lease ', countdown(hold.expires_in_ms, at)),
          el('span', 'held-for', 'held ', countup(hold.held_for_ms, at)),
          el('span', hold.session ? 'session yes' : 'session no', hold.session ? 'in a session' : 'no session'));
        cell.append(row);
      }
      const shown = item.holds.length;
      const total = item.holders;
      if (Number.isInteger(total) && total > shown) cell.append(el('div', 'more', `and ${total - shown} more`));
    } else if (typeof item.ttl_ms === 'number' && item.ttl_ms > 0) {
      // A server without holds in its listing: the lease left.
      cell.append(el('div', 'hold', el('span', 'lease', 'lease ', countdown(item.ttl_ms, at))));
    }
    return cell;
  }

  /// Waiters: the queue in Redis (every instance) and those waiting on
  /// the instance that answered.
  function waitingCell(item) {
    const cell = el('td', 'waiting');
    if (typeof item.queued === 'number') cell.append(el('div', 'queued', `${item.queued} queued`));
    if (typeof item.waiters === 'number' && item.waiters > 0) cell.append(el('div', 'waiters', `${item.waiters} waiting here`));
    return cell;
  }

  function actionCell(spec, item) {
    const cell = el('td', 'actions');
    const admin = spec.admin;
    if (spec.held && !spec.held(item)) return cell;
    const button = el('button', 'danger admin-action', admin.label);
    button.type = 'button';
    button.dataset.action = admin.label.toLowerCase().replace(/ /g, '-');
    button.addEventListener('click', () => adminAction(spec, item.name));
    cell.append(button);
    return cell;
  }

  function objectRow(spec, { item, at }) {
    const row = el('tr', 'object');
    row.dataset.name = String(item.name);
    const state = el('td', 'state');
    for (const part of spec.state(item)) state.append(el('div', null, part));
    row.append(el('td', 'name', String(item.name)), state, holdsCell(item, at), waitingCell(item));
    if (spec.admin && view.who?.role === 'admin') row.append(actionCell(spec, item));
    return row;
  }

  function sessionRow({ item, at }) {
    const row = el('tr', 'session-row');
    const owner = item.owner === null || item.owner === undefined
      ? el('span', 'owner none', 'no owner')
      : el('span', 'owner', item.owner);
    const holds = Array.isArray(item.holds) ? item.holds.length : item.holds;
    const expires = typeof item.expires_in_ms === 'number' ? countdown(item.expires_in_ms, at) : '–';
    row.append(el('td', 'name', owner), el('td', 'ttl', duration(item.ttl_ms)),
      el('td', 'expires', expires), el('td', 'session-holds', String(holds ?? '–')));
    return row;
  }

  // ---- the page ----

  function buildSections() {
    const nav = $('kinds');
    const main = $('sections');
    for (const spec of KINDS) {
      const link = el('a', null, spec.title, ' ', el('span', 'count', ''));
      link.href = `#kind-${spec.kind}`;
      nav.append(link);
      const section = el('section', 'kind');
      section.id = `kind-${spec.kind}`;
      section.dataset.kind = spec.kind;
      const count = el('span', 'count', '');
      const heading = el('h2', null, spec.title, ' ', count);
      const error = el('p', 'error');
      error.hidden = true;
      const more = el('p', 'more', 'More objects than shown: narrow them with a prefix.');
      more.hidden = true;
      const empty = el('p', 'empty', 'None.');
      const head = el('tr');
      const body = el('tbody');
      const table = el('table', null, el('thead', null, head), body);
      section.append(heading, error, more, table, empty);
      main.append(section);
      view.sections.set(spec.kind, { spec, section, count, navCount: link.querySelector('.count'), error, more, empty, head, body, table });
    }
  }

  /// Table headings: the action column only for admin keys.
  function renderHeads() {
    for (const { spec, head } of view.sections.values()) {
      const names = spec.sessions
        ? ['Owner', 'TTL', 'Expires in', 'Holds']
        : ['Name', 'State', 'Holders (owner, holds, lease left, held for, session)', 'Waiting'];
      if (spec.admin && view.who?.role === 'admin') names.push('Admin');
      head.replaceChildren(...names.map((name) => el('th', null, name)));
    }
  }

  function renderKind(spec, result) {
    const parts = view.sections.get(spec.kind);
    const rows = result.items.map((entry) => (spec.sessions ? sessionRow(entry) : objectRow(spec, entry)));
    parts.body.replaceChildren(...rows);
    const count = `${result.items.length}${result.more ? '+' : ''}`;
    parts.count.textContent = `(${count})`;
    parts.navCount.textContent = count;
    parts.error.hidden = !result.error;
    parts.error.textContent = result.error ? `Could not list: ${result.error}` : '';
    parts.more.hidden = !result.more;
    parts.empty.hidden = result.items.length > 0 || Boolean(result.error);
    parts.table.hidden = result.items.length === 0;
  }

  function renderWho() {
    const who = view.who;
    const node = $('whoami');
    if (!who) {
      node.replaceChildren('namespace and role unknown');
      return;
    }
    const namespace = who.namespace === null || who.namespace === undefined
      ? el('span', 'namespace none', 'none (no API keys configured)')
      : el('span', 'namespace', who.namespace);
    node.replaceChildren('namespace ', namespace, ' · role ', el('span', 'role', String(who.role)));
    $('forget-key').hidden = !sessionStorage.getItem(KEY_STORAGE);
  }

  function status(text, className = '') {
    const node = $('status');
    node.textContent = text;
    node.className = className;
  }

  function notice(text, className = '') {
    const node = $('notice');
    node.textContent = text;
    node.className = className;
    node.hidden = !text;
  }

  // ---- refreshing ----

  async function identify() {
    const answer = await api('GET', 'whoami');
    view.who = answer.status === 200 && answer.body && typeof answer.body === 'object' ? answer.body : null;
    view.identified = true;
    renderWho();
    renderHeads();
  }

  async function refresh() {
    if (view.inFlight) {
      view.again = true;
      return;
    }
    clearTimeout(view.timer);
    if (document.hidden || view.needKey) return;
    view.inFlight = true;
    view.lastStart = performance.now();
    try {
      if (!view.identified) await identify();
      const prefix = $('prefix').value;
      const results = await Promise.all(KINDS.map((spec) => list(spec.kind, prefix).catch((error) => {
        if (error instanceof NeedKey) throw error;
        return { items: [], error: String(error.message ?? error) };
      })));
      KINDS.forEach((spec, i) => renderKind(spec, results[i]));
      status(`Updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      if (error instanceof NeedKey) askKey();
      else status(`Could not refresh: ${error.message ?? error}`, 'error');
    } finally {
      view.inFlight = false;
    }
    schedule(view.again ? 0 : REFRESH_MS - (performance.now() - view.lastStart));
    view.again = false;
  }

  /// The next refresh, never sooner than REFRESH_MS after the last start;
  /// none while the tab is hidden or a key is needed.
  function schedule(delay) {
    clearTimeout(view.timer);
    if (document.hidden || view.needKey) {
      if (document.hidden) status('Paused while the tab is hidden');
      return;
    }
    const wait = Math.max(delay, REFRESH_MS - (performance.now() - view.lastStart), 0);
    view.timer = setTimeout(refresh, wait);
  }

  // ---- the key ----

  function askKey() {
    const refused = Boolean(sessionStorage.getItem(KEY_STORAGE));
    sessionStorage.removeItem(KEY_STORAGE);
    view.needKey = true;
    view.who = null;
    view.identified = false;
    clearTimeout(view.timer);
    $('key-reason').textContent = refused
      ? 'That key was refused (401). Give another key.'
      : 'This server has API keys configured: give a key to see its namespace.';
    $('forget-key').hidden = true;
    status('An API key is needed', 'error');
    const dialog = $('key-dialog');
    if (!dialog.open) dialog.showModal();
    $('key-input').focus();
  }

  function useKey(event) {
    event.preventDefault();
    const key = $('key-input').value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORAGE, key);
    $('key-input').value = '';
    $('key-dialog').close();
    view.needKey = false;
    view.who = null;
    view.identified = false;
    refresh();
  }

  function forgetKey() {
    sessionStorage.removeItem(KEY_STORAGE);
    for (const { body } of view.sections.values()) body.replaceChildren();
    view.who = null;
    renderWho();
    askKey();
  }

  // ---- admin actions ----

  /// Asks in the page's own dialog; resolves true when confirmed.
  function confirmAction(title, text, label) {
    const dialog = $('confirm-dialog');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = label;
    return new Promise((resolve) => {
      const done = (answer) => {
        $('confirm-form').removeEventListener('submit', ok);
        $('confirm-cancel').removeEventListener('click', cancel);
        dialog.removeEventListener('cancel', cancel);
        if (dialog.open) dialog.close();
        resolve(answer);
      };
      const ok = (event) => {
        event.preventDefault();
        done(true);
      };
      const cancel = (event) => {
        event.preventDefault();
        done(false);
      };
      $('confirm-form').addEventListener('submit', ok);
      $('confirm-cancel').addEventListener('click', cancel);
      dialog.addEventListener('cancel', cancel);
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  async function adminAction(spec, name) {
    const admin = spec.admin;
    const confirmed = await confirmAction(
      `${admin.verb} ${spec.noun} “${name}”?`,
      admin.effect,
      `${admin.verb} ${spec.noun}`,
    );
    if (!confirmed) return;
    try {
      const answer = await api('DELETE', `${spec.kind}/${encodeURIComponent(name)}`);
      if (answer.status === 200) {
        const body = answer.body ?? {};
        const happened = body.released ?? body.deleted;
        notice(happened === false
          ? `${spec.noun} “${name}”: nothing to ${admin.verb.toLowerCase()} (it was free or gone already)`
          : `${admin.verb === 'Delete' ? 'Deleted' : 'Force-unlocked'} ${spec.noun} “${name}”`, 'ok');
      } else {
        notice(`${admin.verb} ${spec.noun} “${name}” failed: ${problemText(answer)}`, 'error');
      }
    } catch (error) {
      if (error instanceof NeedKey) askKey();
      else notice(`${admin.verb} ${spec.noun} “${name}” failed: ${error.message ?? error}`, 'error');
    }
    refresh();
  }

  // ---- start ----

  function start() {
    buildSections();
    renderHeads();
    $('key-form').addEventListener('submit', useKey);
    // The key is needed to see anything: Escape does not close its dialog.
    $('key-dialog').addEventListener('cancel', (event) => event.preventDefault());
    $('forget-key').addEventListener('click', forgetKey);
    $('filter').addEventListener('submit', (event) => {
      event.preventDefault();
      refresh();
    });
    let typing = null;
    $('prefix').addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(refresh, 250);
    });
    document.addEventListener('visibilitychange', () => {
      if (document.hidden) schedule(0);
      else refresh();
    });
    setInterval(tick, TICK_MS);
    refresh();
  }

  start();
})();
