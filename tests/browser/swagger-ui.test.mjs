// Swagger UI (/docs) in headless Chromium, used the way a person uses it:
// for every primitive, expand the operation, "Try it out", fill in the
// path parameters and the body, "Execute", and read what the page shows
// (the Request URL, the response's status and body). Each step asserts
// that the request went to the operation's own path and that the page
// shows the documented answer.
//
// Run by scripts/browser-test.sh, which starts latchkey in dev mode and
// sets LATCHKEY_URL. On a failure the page's screenshot and HTML are kept
// in BROWSER_TEST_ARTIFACTS (default target/browser-test).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { keep as keepPage, launch } from './pages.mjs';

// The server the page is on: LATCHKEY_URL (open, no API key configured),
// and last a second server with API keys (BROWSER_KEYED_URL, whose admin
// key is BROWSER_KEYED_ADMIN_KEY) for Swagger UI's Authorize button.
let base = process.env.LATCHKEY_URL ?? 'http://127.0.0.1:8080';
const keyedBase = process.env.BROWSER_KEYED_URL;
const keyedAdminKey = process.env.BROWSER_KEYED_ADMIN_KEY;
// Object names unique to this run, so reruns against one server never meet.
const run = Date.now().toString(36);
// How long one step (a click, a response) may take.
const STEP_MS = 15_000;

let browser;
let page;
const foreign = [];
const consoleErrors = [];

before(async () => {
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(STEP_MS);
  const origin = new URL(base).origin;
  page.on('request', (request) => {
    const url = request.url();
    if (!url.startsWith(origin) && !url.startsWith('data:')) foreign.push(url);
  });
  // Chromium logs every 4xx answer as a console error; a flow that asks
  // for one (a refused acquire) shows it on the page and checks it there.
  const answered4xx = /^Failed to load resource: the server responded with a status of 4\d\d /;
  page.on('console', (message) => {
    if (message.type() === 'error' && !answered4xx.test(message.text())) consoleErrors.push(message.text());
  });
  await page.goto(`${base}/docs/`);
  await page.locator('.opblock').first().waitFor();
});

after(async () => {
  await browser?.close();
});

/// A test that keeps the page when it fails.
function flow(name, body) {
  test(name, async () => {
    try {
      await body();
    } catch (error) {
      await keepPage(page, name);
      throw error;
    }
  });
}

/// The operation block of `method` `path`, found by what the page shows
/// (method and path), not by its operation id.
function operation(method, path) {
  return page
    .locator(`.opblock.opblock-${method}`)
    .filter({ has: page.locator(`.opblock-summary-path[data-path="${path}"]`) });
}

/// "Try it out" on one operation: fills `params` (path, query and header
/// parameters by name) and `body` (the JSON body, as an object), executes,
/// and returns what the page shows.
async function tryOut(method, path, { params = {}, body } = {}) {
  const block = operation(method, path);
  assert.equal(await block.count(), 1, `one ${method.toUpperCase()} ${path} block on the page`);
  if (!(await block.evaluate((el) => el.classList.contains('is-open')))) {
    await block.locator('.opblock-summary').first().click();
  }
  // "Try it out" (or, once pressed, "Cancel"; a body edited there adds a
  // "Reset" button of the same class after it).
  const tryButton = block.locator('.try-out__btn').first();
  if ((await tryButton.innerText()).trim() === 'Try it out') await tryButton.click();
  for (const [name, value] of Object.entries(params)) {
    const row = block.locator(`tr[data-param-name="${name}"]`);
    const select = row.locator('select');
    if (await select.count()) await select.selectOption(String(value));
    else await row.locator('input').fill(String(value));
  }
  if (body !== undefined) {
    await block.locator('textarea.body-param__text').fill(JSON.stringify(body, null, 2));
  }
  // A block executed before shows its old response until the new one
  // arrives: clear it first, and wait until it is gone (the page redraws
  // later than the click returns).
  const live = block.locator('.live-responses-table tbody tr.response');
  const clear = block.locator('.btn-clear');
  if (await clear.count()) {
    await clear.click();
    await live.waitFor({ state: 'detached' });
  }
  await block.locator('.execute').click();
  await live.waitFor();
  const requestUrl = (await block.locator('.request-url pre, .request-url .microlight').first().innerText()).trim();
  const status = Number((await live.locator('.response-col_status').innerText()).trim());
  const text = await live.locator('.response-col_description .microlight').first().innerText();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    assert.fail(`${method.toUpperCase()} ${path}: the page shows a body that is not JSON: ${text}`);
  }
  return { requestUrl: new URL(requestUrl), status, json };
}

/// Asserts the page sent the request to `expectedPath` and shows `status`.
function expectAnswer(answer, expectedPath, status) {
  assert.equal(answer.requestUrl.origin, new URL(base).origin, 'the request went to the service');
  assert.equal(answer.requestUrl.pathname, expectedPath, 'the request went to the operation\'s own path');
  assert.equal(answer.status, status, `status shown for ${expectedPath}: ${JSON.stringify(answer.json)}`);
}

/// Asserts a Grant as the OpenAPI document describes it.
function expectGrant(json, name) {
  assert.equal(json.name, name);
  assert.equal(typeof json.holder, 'string');
  assert.ok(Number.isInteger(json.fencing_token) && json.fencing_token > 0, 'a fencing token');
  assert.equal(json.hold_count, 1);
  assert.equal(json.lease_ms, 30000);
  assert.equal(json.heartbeat_interval_ms, 10000);
}

/// Acquire (with the operation's example body) and release, for the lock
/// kinds served under `prefix`.
async function acquireAndRelease(prefix, { acquirePath = `/${prefix}/{name}/acquire`, mode } = {}) {
  const name = `ui-${prefix}-${mode ?? 'lock'}-${run}`;
  const acquired = await tryOut('post', acquirePath, { params: { name } });
  expectAnswer(acquired, acquirePath.replace('{name}', name), 201);
  expectGrant(acquired.json, name);
  if (mode) assert.equal(acquired.json.mode, mode);
  const holder = acquired.json.holder;
  const releasePath = `/${prefix}/{name}/holders/{holder}`;
  const released = await tryOut('delete', releasePath, {
    params: mode ? { name, holder, mode } : { name, holder },
  });
  expectAnswer(released, `/${prefix}/${name}/holders/${holder}`, 200);
  assert.equal(released.json.released, true);
  if (mode) assert.equal(released.json.mode, mode);
}

flow('locks: acquire, then release', () => acquireAndRelease('locks'));

flow('fair locks: acquire, then release', () => acquireAndRelease('fair-locks'));

flow('read-write locks: read acquire, then release the read hold', () =>
  acquireAndRelease('rwlocks', { acquirePath: '/rwlocks/{name}/read/acquire', mode: 'read' }),
);

flow('read-write locks: write acquire, then release the write hold', () =>
  acquireAndRelease('rwlocks', { acquirePath: '/rwlocks/{name}/write/acquire', mode: 'write' }),
);

flow('semaphores: configure, acquire, then release', async () => {
  const name = `ui-sem-${run}`;
  const configured = await tryOut('put', '/semaphores/{name}', { params: { name }, body: { permits: 2 } });
  expectAnswer(configured, `/semaphores/${name}`, 200);
  const { permits, available, holders } = configured.json;
  assert.equal(configured.json.name, name);
  assert.deepEqual({ permits, available, holders }, { permits: 2, available: 2, holders: 0 });
  const acquired = await tryOut('post', '/semaphores/{name}/acquire', { params: { name } });
  expectAnswer(acquired, `/semaphores/${name}/acquire`, 201);
  assert.equal(acquired.json.permits, 1);
  assert.ok(acquired.json.fencing_token > 0);
  const holder = acquired.json.holder;
  const released = await tryOut('delete', '/semaphores/{name}/holders/{holder}', { params: { name, holder } });
  expectAnswer(released, `/semaphores/${name}/holders/${holder}`, 200);
  assert.deepEqual(released.json, { released_permits: 1, left_queue: false });
});

flow('latches: set, count down, then wait', async () => {
  const name = `ui-latch-${run}`;
  const set = await tryOut('put', '/latches/{name}', { params: { name }, body: { count: 1 } });
  expectAnswer(set, `/latches/${name}`, 201);
  assert.deepEqual(set.json, { name, count: 1, open: false });
  const counted = await tryOut('post', '/latches/{name}/count-down', { params: { name } });
  expectAnswer(counted, `/latches/${name}/count-down`, 200);
  assert.deepEqual(counted.json, { count: 0, open: true });
  const waited = await tryOut('get', '/latches/{name}/wait', { params: { name, wait_ms: 1000 } });
  expectAnswer(waited, `/latches/${name}/wait`, 200);
  assert.equal(waited.requestUrl.searchParams.get('wait_ms'), '1000');
  assert.deepEqual(waited.json, { count: 0, open: true });
});

flow('rate limiters: configure, an admitted acquire, a refused one (429), per key and several limits at once', async () => {
  const name = `ui-rate-${run}`;
  // One permit a minute: the second acquire comes too early.
  const configured = await tryOut('put', '/rate-limiters/{name}', {
    params: { name },
    body: { rate: 1, per_ms: 60000 },
  });
  expectAnswer(configured, `/rate-limiters/${name}`, 200);
  assert.deepEqual(configured.json, { name, rate: 1, per_ms: 60000, burst: 1, available: 1 });
  // The operation's example body, as the page pre-fills it. The page
  // pre-fills the Idempotency-Key example too: the same key again would
  // replay the first answer (200), so each acquire gets its own.
  const acquire = (key) =>
    tryOut('post', '/rate-limiters/{name}/acquire', { params: { name, 'Idempotency-Key': `${name}-${key}` } });
  const admitted = await acquire('first');
  expectAnswer(admitted, `/rate-limiters/${name}/acquire`, 200);
  assert.deepEqual(admitted.json, { permits: 1, available: 0 });
  const replayed = await acquire('first');
  expectAnswer(replayed, `/rate-limiters/${name}/acquire`, 200);
  assert.deepEqual(replayed.json, { permits: 1, available: 0 });
  const refused = await acquire('second');
  expectAnswer(refused, `/rate-limiters/${name}/acquire`, 429);
  assert.equal(refused.json.type, '/problems/rate-limited');
  assert.equal(refused.json.status, 429);
  // The next permit is a minute after the first acquire, less the time the
  // page took since (tens of seconds on a loaded machine).
  assert.ok(refused.json.retry_after_ms > 20000 && refused.json.retry_after_ms <= 60000, `the next permit is most of a minute away: ${refused.json.retry_after_ms}`);
  assert.equal(refused.json.available, 0);
  // Per key: a key's own bucket, full though the shared one is empty.
  const keyed = await tryOut('post', '/rate-limiters/{name}/acquire', {
    params: { name, 'Idempotency-Key': `${name}-alice` },
    body: { key: 'alice' },
  });
  expectAnswer(keyed, `/rate-limiters/${name}/acquire`, 200);
  assert.deepEqual(keyed.json, { permits: 1, available: 0 });
  const read = await tryOut('get', '/rate-limiters/{name}', { params: { name, key: 'alice' } });
  assert.equal(read.requestUrl.searchParams.get('key'), 'alice');
  expectAnswer(read, `/rate-limiters/${name}`, 200);
  assert.equal(read.json.key, 'alice');
  assert.equal(read.json.available, 0);
  // Several limits at once: all or nothing, the refusal names alice's.
  const both = await tryOut('post', '/rate-limiters/acquire', {
    body: { limits: [{ name, key: 'bob' }, { name, key: 'alice' }] },
  });
  expectAnswer(both, '/rate-limiters/acquire', 429);
  assert.deepEqual(both.json.limit, { name, key: 'alice' });
  const bob = await tryOut('post', '/rate-limiters/acquire', {
    body: { limits: [{ name, key: 'bob' }] },
  });
  expectAnswer(bob, '/rate-limiters/acquire', 200);
  assert.deepEqual(bob.json, { limits: [{ name, key: 'bob', permits: 1, available: 0 }] });
});

flow('multi-locks: acquire a set, then release it', async () => {
  const names = [`ui-multi-a-${run}`, `ui-multi-b-${run}`];
  const acquired = await tryOut('post', '/multilocks/acquire', {
    body: { names, lease_ms: 30000, wait_ms: 0 },
  });
  expectAnswer(acquired, '/multilocks/acquire', 201);
  assert.deepEqual(acquired.json.locks.map((l) => l.name), names);
  assert.ok(acquired.json.locks.every((l) => l.fencing_token > 0 && l.hold_count === 1));
  const released = await tryOut('post', '/multilocks/release', {
    body: { names, holder: acquired.json.holder },
  });
  expectAnswer(released, '/multilocks/release', 200);
  assert.deepEqual(released.json, { released: names });
});

flow('RedLock: acquire on a quorum, then release', async () => {
  const name = `ui-redlock-${run}`;
  const acquired = await tryOut('post', '/redlocks/{name}/acquire', { params: { name } });
  expectAnswer(acquired, `/redlocks/${name}/acquire`, 201);
  assert.equal(acquired.json.name, name);
  assert.ok(acquired.json.fencing_token > 0);
  assert.ok(acquired.json.validity_ms > 0 && acquired.json.validity_ms <= 30000);
  assert.deepEqual(acquired.json.nodes, { acquired: 3, total: 3 });
  const holder = acquired.json.holder;
  const released = await tryOut('delete', '/redlocks/{name}/holders/{holder}', { params: { name, holder } });
  expectAnswer(released, `/redlocks/${name}/holders/${holder}`, 200);
  assert.deepEqual(released.json, { released: true });
});

flow('sessions: create one, acquire a lock in it, heartbeat it, then delete it', async () => {
  const created = await tryOut('post', '/sessions', { body: { ttl_ms: 30000 } });
  expectAnswer(created, '/sessions', 201);
  const { session } = created.json;
  assert.match(session, /^[0-9a-f]{32}$/, 'a server-made id of 128 random bits');
  assert.deepEqual(created.json, { session, ttl_ms: 30000, heartbeat_interval_ms: 10000, holds: 0 });
  const name = `ui-session-${run}`;
  const acquired = await tryOut('post', '/locks/{name}/acquire', { params: { name }, body: { session } });
  expectAnswer(acquired, `/locks/${name}/acquire`, 201);
  // A grant in a session shows the hold's real lease: what is left of the
  // session's TTL (time passes between the two clicks).
  const grant = acquired.json;
  assert.ok(grant.lease_ms > 0 && grant.lease_ms <= 30000, `a lease within the session's TTL: ${grant.lease_ms}`);
  assert.equal(grant.expires_in_ms, grant.lease_ms);
  expectGrant({ ...grant, lease_ms: 30000, heartbeat_interval_ms: 10000 }, name);
  const beat = await tryOut('post', '/sessions/{id}/heartbeat', { params: { id: session } });
  expectAnswer(beat, `/sessions/${session}/heartbeat`, 200);
  assert.deepEqual(beat.json, { session, ttl_ms: 30000, heartbeat_interval_ms: 10000, holds: 1 });
  const deleted = await tryOut('delete', '/sessions/{id}', { params: { id: session } });
  expectAnswer(deleted, `/sessions/${session}`, 200);
  assert.deepEqual(deleted.json, { released: 1 });
  const state = await tryOut('get', '/locks/{name}', { params: { name } });
  expectAnswer(state, `/locks/${name}`, 200);
  assert.equal(state.json.locked, false, 'released with its session');
});

flow('an error response shows its own example, and the page reached no other host', async () => {
  // The documented 404 of a release is `not-held`, not the 409 `lock-held`.
  // The block is open: the release flow above used it.
  const block = operation('delete', '/locks/{name}/holders/{holder}');
  const documented = block.locator('.responses-wrapper tr.response[data-code="404"]');
  assert.equal(await documented.count(), 1, 'one documented 404 response');
  const shown = await documented.locator('pre.example').first().innerText();
  const example = JSON.parse(shown);
  assert.equal(example.status, 404);
  assert.equal(example.type, '/problems/not-held');
  assert.deepEqual(foreign, [], 'requests to other hosts');
  assert.deepEqual(consoleErrors, [], 'console errors on /docs');
});

flow('with API keys: Try it out answers 401 until Authorize is given a key, then works', async () => {
  assert.ok(keyedBase && keyedAdminKey, 'BROWSER_KEYED_URL and BROWSER_KEYED_ADMIN_KEY are set');
  base = keyedBase;
  await page.goto(`${base}/docs/`);
  await page.locator('.opblock').first().waitFor();
  const name = `ui-keyed-${run}`;
  const refused = await tryOut('post', '/locks/{name}/acquire', { params: { name } });
  expectAnswer(refused, `/locks/${name}/acquire`, 401);
  assert.equal(refused.json.type, '/problems/unauthorized');
  // Authorize, as a person does: the button, the key, Authorize, Close.
  await page.locator('.auth-wrapper .authorize').first().click();
  const dialog = page.locator('.dialog-ux .modal-ux');
  await dialog.locator('input').first().fill(keyedAdminKey);
  await dialog.locator('button.authorize').click();
  await dialog.locator('button.btn-done, button.close-modal').first().click();
  const acquired = await tryOut('post', '/locks/{name}/acquire', { params: { name } });
  expectAnswer(acquired, `/locks/${name}/acquire`, 201);
  expectGrant(acquired.json, name);
  const forced = await tryOut('delete', '/locks/{name}', { params: { name } });
  expectAnswer(forced, `/locks/${name}`, 200);
  assert.deepEqual(forced.json, { released: true });
  // The document shows a 403 on the admin-only operation.
  const documented = operation('delete', '/locks/{name}').locator('.responses-wrapper tr.response[data-code="403"]');
  assert.equal(await documented.count(), 1, 'the force unlock documents its 403');
});
