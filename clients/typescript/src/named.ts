/** What semaphores, latches and rate limiters share: a name under a route, and its deletion. */

import type { Core } from "./core.js";

/** @internal An object of the service at `{prefix}/{name}`. */
export abstract class Named {
  readonly name: string;
  /** @internal */
  protected readonly core: Core;
  readonly #prefix: string;

  /** @internal */
  protected constructor(core: Core, prefix: string, name: string) {
    this.core = core;
    this.#prefix = prefix;
    this.name = name;
  }

  /** @internal Its path, name encoded. */
  protected path(): string {
    return `${this.#prefix}/${encodeURIComponent(this.name)}`;
  }

  /** `DELETE` it; resolves with what the service says (`deleted`, true when it does not say). */
  protected async deleted(): Promise<boolean> {
    const answer = await this.core.call<{ deleted?: boolean }>({ method: "DELETE", path: this.path() });
    return answer?.deleted ?? true;
  }
}
