package io.github.axesched.executor;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Runs per second of the no-op echo through one executor process: starts the command given
 * (an echo executor, e.g. examples/echo or the Go SDK's) against a {@link FakeScheduler}, sends
 * it N signed /axe/run calls from C concurrent callers (the scheduler keeps 8 calls in flight
 * to one executor), and times from the first call to the N-th result acknowledged. Also
 * prints the executor process's CPU time per run (from /proc). Not a test: run by bench.sh.
 *
 * <p>Usage: Bench N C command...
 */
public final class Bench {
    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        int conc = Integer.parseInt(args[1]);
        List<String> cmd = List.of(args).subList(2, args.length);
        String token = "bench-token-0123456789";
        try (FakeScheduler sched = new FakeScheduler()) {
            int port;
            try (ServerSocket ss = new ServerSocket(0)) {
                port = ss.getLocalPort();
            }
            String addr = "127.0.0.1:" + port;
            ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD);
            pb.environment().putAll(Map.of("AXE_SCHEDULERS", sched.url(), "AXE_LISTEN", addr, "AXE_TOKEN", token, "AXE_APP", "echo"));
            Process p = pb.start();
            try {
                Check.waitFor(() -> sched.registrationCount() > 0, "the executor to register");
                String inc = (String) sched.registrations.get(0).get("incarnation");
                byte[] key = Signatures.dispatchKey(token);
                HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
                // Warm up (JIT, connections), then measure.
                blast(http, key, addr, inc, "w", Math.min(2000, n), conc);
                Check.waitFor(() -> recorded(sched) >= Math.min(2000, n), "the warm-up results");
                int base = recorded(sched);
                long cpu0 = cpuTicks(p.pid());
                long t0 = System.nanoTime();
                blast(http, key, addr, inc, "m", n, conc);
                Check.waitFor(() -> recorded(sched) >= base + n, "the results");
                double secs = (System.nanoTime() - t0) / 1e9;
                long cpu = cpuTicks(p.pid()) - cpu0;
                System.out.printf("%s: %d runs, %d callers: %.0f runs/s, executor CPU %.1f µs/run%n",
                        String.join(" ", cmd), n, conc, n / secs, cpu * 1e6 / 100.0 / n);
            } finally {
                p.destroy();
                p.waitFor();
            }
        }
    }

    static int recorded(FakeScheduler s) {
        synchronized (s) {
            return s.recorded.size();
        }
    }

    static long cpuTicks(long pid) throws IOException {
        long total = 0;
        // The process and its children (the echo script execs java, so usually just one).
        List<Long> pids = new ArrayList<>(List.of(pid));
        ProcessHandle.of(pid).ifPresent(h -> h.descendants().forEach(d -> pids.add(d.pid())));
        for (long q : pids) {
            Path stat = Path.of("/proc/" + q + "/stat");
            if (!Files.exists(stat)) {
                continue;
            }
            String s = Files.readString(stat);
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            total += Long.parseLong(f[11]) + Long.parseLong(f[12]); // utime, stime (clock ticks, 100/s)
        }
        return total;
    }

    static void blast(HttpClient http, byte[] key, String addr, String inc, String prefix, int n, int conc) throws Exception {
        AtomicInteger next = new AtomicInteger();
        AtomicInteger refused = new AtomicInteger();
        List<Thread> ts = new ArrayList<>();
        for (int c = 0; c < conc; c++) {
            Thread t = new Thread(() -> {
                int i;
                while ((i = next.getAndIncrement()) < n) {
                    byte[] body = ("{\"ticket\":\"" + prefix + i + "\",\"task\":\"" + prefix + "task" + i
                            + "\",\"handler\":\"echo\",\"attempt\":1,\"deadline\":0}").getBytes(StandardCharsets.UTF_8);
                    HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create("http://" + addr + "/axe/run"))
                            .header("Authorization", Signatures.sign(key, System.currentTimeMillis(), addr, "/axe/run", "", inc, body))
                            .POST(HttpRequest.BodyPublishers.ofByteArray(body));
                    if (inc != null) { // an executor of protocol version 1 registers none
                        rb.header("X-Axe-Incarnation", inc);
                    }
                    HttpRequest r = rb.build();
                    try {
                        int code = http.send(r, HttpResponse.BodyHandlers.discarding()).statusCode();
                        if (code != 202) {
                            refused.incrementAndGet();
                        }
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                }
            });
            ts.add(t);
            t.start();
        }
        for (Thread t : ts) {
            t.join();
        }
        if (refused.get() > 0) {
            throw new IllegalStateException(refused.get() + " runs refused");
        }
    }
}
