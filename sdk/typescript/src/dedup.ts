// Ticket de-duplication after a run finished (docs/protocol.md, "Tickets"). The scheduler may
// deliver a ticket again (a lost answer, a failover); while the executor remembers the
// ticket's outcome it answers 200 {"duplicate": true, ...} and re-sends the result instead of
// running the handler again. How long is the run's dedup_ttl_ms (the task's longest retry
// span plus five minutes), else the executor's dedupTtlMs.

/** A finished run, remembered by ticket. */
export interface FinishedRun {
  status: "success" | "failed";
  /** The error text reported ("" on success). */
  error: string;
  /** The JSON body of the result callback, re-sent when the ticket comes again. */
  result: string;
  /** When to forget it (Unix ms). */
  expiresAt: number;
}

/**
 * Where finished tickets are remembered. The default, MemoryDedupStore, forgets them when the
 * process ends; a store that keeps them elsewhere (a file, Redis, a database table) makes a
 * restarted executor answer a ticket it ran before its restart as a duplicate, and re-send
 * that result. Either method may return a Promise. A store that fails to answer makes
 * /axe/run answer 500, so the scheduler tries again rather than the handler running twice.
 */
export interface DedupStore {
  /** The remembered outcome of ticket, or undefined when none is remembered or it expired at now. */
  get(ticket: string, now: number): FinishedRun | undefined | Promise<FinishedRun | undefined>;
  /** Remembers the outcome of ticket until run.expiresAt; now is the executor's clock. */
  put(ticket: string, run: FinishedRun, now: number): void | Promise<void>;
}

/** DEDUP_SIZE_DEFAULT is how many finished tickets MemoryDedupStore keeps at most. */
export const DEDUP_SIZE_DEFAULT = 10000;

/**
 * Finished tickets in memory, at most maxEntries of them: beyond that the oldest is forgotten
 * first. Each entry expires at its own time (runs carry their own TTL); expired entries are
 * dropped when looked up, and up to two from the old end at every put, so memory follows the
 * TTLs and not only the size bound.
 */
export class MemoryDedupStore implements DedupStore {
  private readonly entries = new Map<string, FinishedRun>();

  constructor(readonly maxEntries: number = DEDUP_SIZE_DEFAULT) {
    if (!Number.isInteger(maxEntries) || maxEntries < 1) throw new RangeError("maxEntries must be a positive integer");
  }

  get(ticket: string, now: number): FinishedRun | undefined {
    const run = this.entries.get(ticket);
    if (run === undefined) return undefined;
    if (now >= run.expiresAt) {
      this.entries.delete(ticket);
      return undefined;
    }
    return run;
  }

  put(ticket: string, run: FinishedRun, now: number): void {
    for (let dropped = 0; dropped < 2 && this.entries.size > 0; dropped++) {
      const [k, v] = this.entries.entries().next().value as [string, FinishedRun];
      if (now < v.expiresAt) break;
      this.entries.delete(k);
    }
    this.entries.delete(ticket); // a re-put moves to the young end
    this.entries.set(ticket, run);
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  /** How many tickets are remembered (expired ones not yet dropped included). */
  get size(): number {
    return this.entries.size;
  }
}
