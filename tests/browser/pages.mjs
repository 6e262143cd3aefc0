// What the browser tests share: the browser, and keeping a page (its
// screenshot and HTML) under BROWSER_TEST_ARTIFACTS (default
// target/browser-test) when a step fails.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const artifacts = process.env.BROWSER_TEST_ARTIFACTS ?? 'target/browser-test';

/// Debian's chromium (CHROMIUM), headless, without anything that would
/// reach another host on its own.
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/// Keeps `page` as it is now (screenshot and HTML) under `artifacts`.
export async function keep(page, name) {
  mkdirSync(artifacts, { recursive: true });
  const file = join(artifacts, name.replace(/[^A-Za-z0-9_-]+/g, '_'));
  await page.screenshot({ path: `${file}.png`, fullPage: true }).catch(() => {});
  writeFileSync(`${file}.html`, await page.content().catch(() => ''));
  console.error(`kept ${file}.png and ${file}.html`);
}
