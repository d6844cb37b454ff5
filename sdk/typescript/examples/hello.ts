import { setTimeout as sleep } from "node:timers/promises";
import { Executor } from "../src/index.js";

const executor = new Executor({
  app: "hello",
  schedulers: (process.env.AXE_SCHEDULERS ?? "http://127.0.0.1:7070").split(","),
  listen: process.env.AXE_LISTEN ?? "127.0.0.1:9100",
  token: process.env.AXE_TOKEN,
});

executor.handle("greet", async ({ params, attempt, signal }) => {
  const { name = "world" } = (params ?? {}) as { name?: string };
  await sleep(100, undefined, { signal }); // ends early when the run is killed or times out
  if (name === "") throw new Error("name: must not be empty"); // a throw fails the run
  return { greeting: `hello, ${name}`, attempt }; // the output, as JSON
});

await executor.start();
process.once("SIGTERM", () => executor.stop().then(() => process.exit(0)));
