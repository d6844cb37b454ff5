package io.github.axesched.executor;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A {@link DedupStore} in memory, holding at most a fixed number of tickets (the oldest go
 * first). Each ticket also expires on its own: the TTL of its run.
 */
public final class InMemoryDedupStore implements DedupStore {
    /** The default bound on remembered tickets. */
    public static final int SIZE_DEFAULT = 10_000;

    private final int size;
    private final LinkedHashMap<String, Finished> entries = new LinkedHashMap<>();

    public InMemoryDedupStore() {
        this(SIZE_DEFAULT);
    }

    public InMemoryDedupStore(int size) {
        if (size <= 0) {
            throw new IllegalArgumentException("size must be positive, got " + size);
        }
        this.size = size;
    }

    @Override
    public synchronized Finished get(String ticket, long nowMs) {
        Finished f = entries.get(ticket);
        if (f == null) {
            return null;
        }
        if (nowMs >= f.expiresAtMs()) {
            entries.remove(ticket);
            return null;
        }
        return f;
    }

    @Override
    public synchronized void put(String ticket, Finished f) {
        // Drop up to two expired entries from the old end, so that memory follows the TTLs in
        // the usual case (similar TTLs), not only the size bound.
        long now = System.currentTimeMillis();
        Iterator<Map.Entry<String, Finished>> it = entries.entrySet().iterator();
        for (int i = 0; i < 2 && it.hasNext(); i++) {
            if (now < it.next().getValue().expiresAtMs()) {
                break;
            }
            it.remove();
        }
        entries.remove(ticket);
        entries.put(ticket, f);
        while (entries.size() > size) {
            Iterator<String> oldest = entries.keySet().iterator();
            oldest.next();
            oldest.remove();
        }
    }

    /** How many tickets are remembered (expired ones included until they are dropped). */
    public synchronized int size() {
        return entries.size();
    }
}
