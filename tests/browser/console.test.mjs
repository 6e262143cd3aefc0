// The operator console (/console) in headless Chromium, against latchkey
// with API keys: an admin and a client key of namespace `ops`, an admin key
// of namespace `other`. A lock is held by the real `latchkey lock`; one
// object of every other kind is made through the API. The page must ask
// for a key, show the key's namespace and role, list every kind with its
// holders' owner labels (as text, never as markup), a lease that counts
// down, permits, counts and queues; let an admin force-unlock the CLI's
// lock after a confirmation, which stops the command; show no admin
// buttons to a client key; and show a namespace none of another's objects.
// A screenshot of the page is kept as console.png in BROWSER_TEST_ARTIFACTS.
//
// Run by scripts/browser-test.sh, which starts latchkey and sets
// BROWSER_KEYED_URL, the CONSOLE_*_KEY keys and LATCHKEY_BIN.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { artifacts, keep, launch } from './pages.mjs';

const base = process.env.BROWSER_KEYED_URL;
const keys = {
  admin: process.env.CONSOLE_ADMIN_KEY,
  client: process.env.CONSOLE_CLIENT_KEY,
  other: process.env.CONSOLE_OTHER_KEY,
};
const latchkeyBin = process.env.LATCHKEY_BIN ?? 'target/debug/latchkey';
const run = Date.now().toString(36);
const STEP_MS = 15_000;
/// Leases of the objects made through the API: longer than the test.
const LONG_MS = 600_000;
/// The CLI's lease: it heartbeats every third of it, so it notices a force
/// unlock within that.
const CLI_LEASE_MS = 15_000;

// Owner labels are anyone's text: these carry markup that must be shown
// as text.
const cliOwner = `cli <b>ops</b> "nightly" pid 4242 <img src=x> ${run}`;
const names = {
  lock: `con-lock-${run}`,
  fairLock: `con-fair-${run}`,
  rwlock: `con-rw-${run}`,
  semaphore: `con-sem-${run}`,
  latch: `con-latch-${run}`,
  redlock: `con-red-${run}`,
  rateLimiter: `con-rate-${run}`,
  otherLock: `con-other-${run}`,
};
const owners = {
  fairLock: `web-7 pid 4242 POST /orders/42 ${run}`,
  rwlock: `reader <script>alert(1)</script> ${run}`,
  semaphore: `export worker ${run}`,
  redlock: `cron nightly-report ${run}`,
  session: `session owner ${run}`,
  other: `other team ${run}`,
};

let browser;
let cli; // { child, exited: Promise<{code, signal}>, stderr }
const pages = [];
const problems = []; // console errors, foreign requests, CSP violations

/// One call to the API with `key`.
async function call(key, method, path, body) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

async function must(key, method, path, body, status) {
  const answer = await call(key, method, path, body);
  assert.equal(answer.status, status, `${method} ${path}: ${JSON.stringify(answer.json)}`);
  return answer.json;
}

async function until(what, check, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/// `latchkey lock NAME --owner LABEL -- sleep 120` with the admin key of
/// `ops`.
function startCli() {
  const child = spawn(
    latchkeyBin,
    ['lock', names.lock, '--lease-ms', String(CLI_LEASE_MS), '--owner', cliOwner, '--', 'sleep', '120'],
    { env: { ...process.env, LATCHKEY_URL: base, LATCHKEY_API_KEY: keys.admin }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const state = { child, stderr: '' };
  child.stderr.on('data', (chunk) => (state.stderr += chunk));
  state.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return state;
}

/// A tab of its own (its own sessionStorage) on the console.
async function openConsole() {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const origin = new URL(base).origin;
  page.on('request', (request) => {
    const url = request.url();
    if (!url.startsWith(origin) && !url.startsWith('data:')) problems.push(`request to ${url}`);
  });
  // A 401 before the key is given is logged by Chromium as a failed
  // resource; the page handles it (it asks for a key).
  const answered401 = /^Failed to load resource: the server responded with a status of 401 /;
  page.on('console', (message) => {
    if (message.type() === 'error' && !answered401.test(message.text())) problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('dialog', (dialog) => {
    problems.push(`unexpected browser dialog: ${dialog.message()}`);
    dialog.dismiss();
  });
  pages.push(page);
  await page.goto(`${base}/console`);
  return page;
}

/// Gives the key dialog `key` (when `accepted`, waits until it closes).
async function giveKey(page, key, { accepted = true } = {}) {
  const dialog = page.locator('#key-dialog');
  await dialog.waitFor({ state: 'visible' });
  await page.locator('#key-input').fill(key);
  await page.locator('#key-submit').click();
  if (accepted) await dialog.waitFor({ state: 'hidden' });
}

/// A console tab with `key` given, once it shows its namespace.
async function consoleWith(key, namespace) {
  const page = await openConsole();
  await giveKey(page, key);
  await page.locator('#whoami .namespace', { hasText: namespace }).waitFor();
  return page;
}

/// The row of object `name` in the section of `kind`.
function row(page, kind, name) {
  return page.locator(`section[data-kind="${kind}"] tr.object[data-name="${name}"]`);
}

function flow(name, body) {
  test(name, async () => {
    try {
      await body();
    } catch (error) {
      for (const [i, page] of pages.entries()) await keep(page, `console ${name} ${i}`);
      if (cli) console.error(`latchkey lock's stderr:\n${cli.stderr}`);
      throw error;
    }
  });
}

/// Seconds shown by a lease or "held for" ("12.3 s", "1 min 05 s").
function seconds(text) {
  const minutes = /(\d+) min (\d+) s/.exec(text);
  if (minutes) return Number(minutes[1]) * 60 + Number(minutes[2]);
  const plain = /([\d.]+) s/.exec(text);
  assert.ok(plain, `a time: ${text}`);
  return Number(plain[1]);
}

before(async () => {
  assert.ok(base && keys.admin && keys.client && keys.other, 'BROWSER_KEYED_URL and the CONSOLE_*_KEY keys are set');
  browser = await launch();
  const admin = keys.admin;
  cli = startCli();
  // One object of every other kind, with owner labels; a session holding
  // the fair lock.
  const session = await must(admin, 'POST', '/sessions', { ttl_ms: LONG_MS, owner: owners.session }, 201);
  await must(admin, 'POST', `/fair-locks/${names.fairLock}/acquire`, { owner: owners.fairLock, session: session.session }, 201);
  await must(admin, 'POST', `/rwlocks/${names.rwlock}/read/acquire`, { owner: owners.rwlock, lease_ms: LONG_MS }, 201);
  await must(admin, 'PUT', `/semaphores/${names.semaphore}`, { permits: 3 }, 200);
  await must(admin, 'POST', `/semaphores/${names.semaphore}/acquire`, { permits: 2, owner: owners.semaphore, lease_ms: LONG_MS }, 201);
  await must(admin, 'PUT', `/latches/${names.latch}`, { count: 2 }, 201);
  await must(admin, 'POST', `/redlocks/${names.redlock}/acquire`, { owner: owners.redlock, lease_ms: LONG_MS }, 201);
  await must(admin, 'PUT', `/rate-limiters/${names.rateLimiter}`, { rate: 5, per_ms: 60_000 }, 200);
  await must(keys.other, 'POST', `/locks/${names.otherLock}/acquire`, { owner: owners.other, lease_ms: LONG_MS }, 201);
  await until('the CLI to hold its lock', async () => (await call(admin, 'GET', `/locks/${names.lock}`)).json?.locked);
});

after(async () => {
  if (cli && cli.child.exitCode === null && cli.child.signalCode === null) cli.child.kill('SIGTERM');
  await browser?.close();
});

let adminPage;

flow('the page asks for a key, refuses a wrong one, keeps the right one in sessionStorage only, and shows its namespace and role', async () => {
  adminPage = await openConsole();
  await giveKey(adminPage, `not-a-key-${run}`, { accepted: false });
  // Refused: the dialog comes back and says so.
  await adminPage.locator('#key-reason', { hasText: 'refused' }).waitFor();
  await giveKey(adminPage, keys.admin);
  await adminPage.locator('#whoami .namespace', { hasText: 'ops' }).waitFor();
  assert.equal(await adminPage.locator('#whoami .role').innerText(), 'admin');
  const stored = await adminPage.evaluate(() => ({
    session: Object.values(sessionStorage),
    local: localStorage.length,
    cookie: document.cookie,
  }));
  assert.deepEqual(stored, { session: [keys.admin], local: 0, cookie: '' });
});

flow('every kind is listed with its holders, owners, permits, counts and availability', async () => {
  const page = adminPage;
  const fair = row(page, 'fair-locks', names.fairLock);
  await fair.waitFor();
  assert.equal(await fair.locator('.hold .owner').innerText(), owners.fairLock);
  assert.equal(await fair.locator('.hold .session').innerText(), 'in a session');
  assert.match(await fair.locator('.waiting').innerText(), /0 queued/);

  const rw = row(page, 'rwlocks', names.rwlock);
  await rw.waitFor();
  // Markup in a label is text on the page, never an element.
  assert.equal(await rw.locator('.hold .owner').innerText(), owners.rwlock);
  assert.equal(await rw.locator('.hold .owner script').count(), 0);
  assert.match(await rw.locator('.hold .amount').innerText(), /read/);
  assert.equal(await rw.locator('.hold .session').innerText(), 'no session');

  const sem = row(page, 'semaphores', names.semaphore);
  await sem.waitFor();
  assert.match(await sem.locator('.state').innerText(), /1 \/ 3 permits available/);
  assert.equal(await sem.locator('.hold .owner').innerText(), owners.semaphore);
  assert.match(await sem.locator('.hold .amount').innerText(), /2 permits/);

  const latch = row(page, 'latches', names.latch);
  await latch.waitFor();
  assert.match(await latch.locator('.state').innerText(), /count 2/);

  const red = row(page, 'redlocks', names.redlock);
  await red.waitFor();
  assert.match(await red.locator('.state').innerText(), /held on 3 \/ 3 nodes/);
  assert.equal(await red.locator('.hold .owner').first().innerText(), owners.redlock);

  const rate = row(page, 'rate-limiters', names.rateLimiter);
  await rate.waitFor();
  assert.match(await rate.locator('.state').innerText(), /5 \/ 5 available/);

  const session = page.locator('section[data-kind="sessions"] tr.session-row', { hasText: owners.session });
  await session.waitFor();
  assert.equal(await session.locator('.session-holds').innerText(), '1');
  assert.equal(await session.locator('.ttl').innerText(), duration(LONG_MS));
});

/// What the page shows for a whole number of minutes.
function duration(ms) {
  return `${Math.floor(ms / 60_000)} min 00 s`;
}

flow('the lock held by `latchkey lock` shows its owner label and a lease that counts down', async () => {
  const page = adminPage;
  const lock = row(page, 'locks', names.lock);
  await lock.waitFor();
  assert.equal(await lock.locator('.hold .owner').innerText(), cliOwner);
  assert.equal(await lock.locator('.hold .owner img, .hold .owner b').count(), 0, 'markup shown as text');
  assert.match(await lock.locator('.state').innerText(), /held ×1/);
  assert.match(await lock.locator('.hold .session').innerText(), /no session/);
  // Sampled several times: the lease goes down between heartbeats (each
  // renewal puts it back up to 15 s) and "held for" goes up.
  const leases = [];
  const held = [];
  for (let i = 0; i < 8; i++) {
    leases.push(seconds(await lock.locator('.hold .lease').innerText()));
    held.push(seconds(await lock.locator('.hold .held-for').innerText()));
    await page.waitForTimeout(300);
  }
  assert.ok(leases.every((s) => s > 0 && s <= CLI_LEASE_MS / 1000), `leases within the CLI's: ${leases}`);
  assert.ok(leases.some((s, i) => i > 0 && s < leases[i - 1]), `the lease counts down: ${leases}`);
  assert.ok(held.some((s, i) => i > 0 && s > held[i - 1]), `held for counts up: ${held}`);
});

flow('the page refreshes at most once a second', async () => {
  const page = adminPage;
  const listings = [];
  const seen = (request) => {
    if (new URL(request.url()).pathname === '/locks') listings.push(Date.now());
  };
  page.on('request', seen);
  const window = 4000;
  await page.waitForTimeout(window);
  page.off('request', seen);
  assert.ok(listings.length >= 1, 'it refreshed');
  assert.ok(listings.length <= window / 1000 + 1, `${listings.length} listings of locks in ${window} ms`);
});

flow('a hidden tab makes no requests, and refreshes when shown again', async () => {
  const page = adminPage;
  // Headless Chromium keeps its one tab visible: the page is told it is
  // hidden the way a browser tells it (document.hidden, then the event).
  const setHidden = (hidden) => page.evaluate((hidden) => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => hidden });
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (hidden ? 'hidden' : 'visible') });
    document.dispatchEvent(new Event('visibilitychange'));
  }, hidden);
  await setHidden(true);
  await page.locator('#status', { hasText: 'Paused' }).waitFor();
  // A refresh already under way may still finish.
  await page.waitForTimeout(1000);
  const requests = [];
  const seen = (request) => requests.push(request.url());
  page.on('request', seen);
  await page.waitForTimeout(3000);
  assert.deepEqual(requests, [], 'requests while hidden');
  await setHidden(false);
  await page.locator('#status', { hasText: 'Updated' }).waitFor();
  page.off('request', seen);
  assert.ok(requests.some((url) => new URL(url).pathname === '/locks'), 'a refresh once shown');
});

flow('the screenshot of the console is kept', async () => {
  mkdirSync(artifacts, { recursive: true });
  await adminPage.screenshot({ path: join(artifacts, 'console.png'), fullPage: true });
});

flow('a client key sees everything of its namespace and no admin buttons', async () => {
  const page = await consoleWith(keys.client, 'ops');
  assert.equal(await page.locator('#whoami .role').innerText(), 'client');
  await row(page, 'locks', names.lock).waitFor();
  await row(page, 'semaphores', names.semaphore).waitFor();
  assert.equal(await page.locator('button.admin-action').count(), 0, 'admin buttons');
  assert.equal(await page.locator('th', { hasText: 'Admin' }).count(), 0, 'an admin column');
  // Meanwhile the admin's tab shows them.
  assert.ok((await adminPage.locator('button.admin-action').count()) >= 5, 'the admin sees admin buttons');
});

flow('a namespace sees none of another namespace\'s objects', async () => {
  const page = await consoleWith(keys.other, 'other');
  const own = row(page, 'locks', names.otherLock);
  await own.waitFor();
  assert.equal(await own.locator('.hold .owner').innerText(), owners.other);
  const text = await page.locator('main').innerText();
  for (const [what, name] of Object.entries(names)) {
    if (what !== 'otherLock') assert.ok(!text.includes(name), `${name} of ops shown to other`);
  }
  for (const [what, owner] of Object.entries(owners)) {
    if (what !== 'other') assert.ok(!text.includes(owner), `${owner} of ops shown to other`);
  }
  assert.ok(!text.includes(cliOwner));
  // Nor does ops see other's lock.
  assert.ok(!(await adminPage.locator('main').innerText()).includes(names.otherLock));
});

flow('an admin force-unlocks the CLI\'s lock after confirming, and `latchkey lock` stops', async () => {
  const page = adminPage;
  const lock = row(page, 'locks', names.lock);
  const button = lock.locator('button.admin-action', { hasText: 'Force unlock' });
  // Cancelled: nothing happens.
  await button.click();
  const dialog = page.locator('#confirm-dialog');
  await dialog.waitFor({ state: 'visible' });
  assert.match(await page.locator('#confirm-title').innerText(), new RegExp(`Force unlock lock .${names.lock}.\\?`));
  await page.locator('#confirm-cancel').click();
  await dialog.waitFor({ state: 'hidden' });
  assert.equal((await call(keys.admin, 'GET', `/locks/${names.lock}`)).json.locked, true, 'still held after Cancel');
  // Confirmed: the lock is freed, and the command loses its hold.
  await button.click();
  await dialog.waitFor({ state: 'visible' });
  await page.locator('#confirm-ok').click();
  await page.locator('#notice', { hasText: `Force-unlocked lock “${names.lock}”` }).waitFor();
  const ended = await Promise.race([
    cli.exited,
    new Promise((resolve) => setTimeout(() => resolve(null), CLI_LEASE_MS + STEP_MS)),
  ]);
  assert.ok(ended, `latchkey lock still runs; its stderr: ${cli.stderr}`);
  assert.equal(ended.code, 76, `exit 76, the hold was lost: ${JSON.stringify(ended)} ${cli.stderr}`);
  assert.match(cli.stderr, /lost the lock/);
  await lock.waitFor({ state: 'detached' });
});

flow('the console loaded nothing from another host and logged no errors', async () => {
  assert.deepEqual(problems, []);
});
