// The echo executor the conformance suite starts (`axe conformance executor --exec
// sdk/typescript/examples/echo`): it reads AXE_SCHEDULERS, AXE_LISTEN, AXE_TOKEN and AXE_APP,
// serves handler "echo", and exits 0 on SIGTERM after draining and deregistering.
//
// params {"sleep_ms": N} waits N ms (ending early, failed, when the run is killed or its
// deadline passes); {"fail": "text"} fails with "text"; otherwise the output is the params as
// compact JSON ("{}" without params).

import { setTimeout as sleep } from "node:timers/promises";
import { Executor, LISTEN_DEFAULT } from "../src/index.js";

const env = process.env;
const executor = new Executor({
  app: env.AXE_APP || "echo",
  schedulers: (env.AXE_SCHEDULERS ?? "").split(",").map((s) => s.trim()).filter((s) => s !== ""),
  listen: env.AXE_LISTEN || LISTEN_DEFAULT,
  token: env.AXE_TOKEN ?? "",
});

executor.handle("echo", async ({ params, paramsJSON, signal }) => {
  const p = (params !== null && typeof params === "object" ? params : {}) as { sleep_ms?: unknown; fail?: unknown };
  if (typeof p.sleep_ms === "number" && p.sleep_ms > 0) {
    // A cancelled wait fails the run with the signal's reason: killed, or deadline exceeded.
    await sleep(p.sleep_ms, undefined, { signal }).catch((err: unknown) => {
      signal.throwIfAborted();
      throw err;
    });
  }
  if (typeof p.fail === "string") throw new Error(p.fail);
  return paramsJSON ?? "{}";
});

let stopping = false;
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.on(sig, () => {
    if (stopping) return;
    stopping = true;
    executor.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(`echo: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  });
}

try {
  await executor.start();
} catch (err) {
  console.error(`echo: cannot start: ${(err as Error).message}`);
  process.exit(1);
}
