package io.github.axesched.executor;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/** The executor over real HTTP on loopback, against {@link FakeScheduler}. */
public class ExecutorTest implements AutoCloseable {
    static final String TOKEN = "exec-token";
    final List<AutoCloseable> closers = new ArrayList<>();
    final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    FakeScheduler sched;
    Executor ex;
    final CountDownLatch release = new CountDownLatch(1);

    record Reply(int code, Map<String, Object> body) {}

    FakeScheduler scheduler() throws Exception {
        FakeScheduler s = new FakeScheduler();
        closers.add(s);
        return s;
    }

    /** Starts an executor with handlers echo (params back), block (waits for release), sleep (ctx.sleep). */
    Executor start(Consumer<Config> tune) throws Exception {
        if (sched == null) {
            sched = scheduler();
        }
        Config c = new Config().app("app1").schedulers(sched.url()).token(TOKEN)
                .resendMin(Duration.ofMillis(20)).resendMax(Duration.ofMillis(200));
        tune.accept(c);
        ex = new Executor(c);
        ex.handle("echo", ctx -> ctx.paramsJson() == null ? "{}" : ctx.paramsJson());
        ex.handle("block", ctx -> {
            release.await();
            return "released";
        });
        ex.handle("sleep", ctx -> {
            Thread.sleep(60_000);
            return "woke";
        });
        ex.handle("fail", ctx -> {
            throw new IllegalStateException("it broke");
        });
        ex.start();
        Executor started = ex;
        closers.add(() -> {
            release.countDown();
            started.stop(Duration.ofSeconds(5));
        });
        return ex;
    }

    static String run(String ticket, String task, String handler, String extra) {
        return "{\"ticket\":\"" + ticket + "\",\"task\":\"" + task + "\",\"handler\":\"" + handler
                + "\",\"attempt\":1,\"deadline\":0" + extra + "}";
    }

    Reply call(String path, String body, String epoch) throws Exception {
        return call(path, body.getBytes(StandardCharsets.UTF_8), epoch, ex.incarnation(), true);
    }

    @SuppressWarnings("unchecked")
    Reply call(String path, byte[] body, String epoch, String incarnation, boolean sign) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://" + ex.address() + path))
                .POST(HttpRequest.BodyPublishers.ofByteArray(body));
        if (sign) {
            b.header("Authorization", Signatures.sign(Signatures.dispatchKey(TOKEN), System.currentTimeMillis(),
                    ex.address(), path, epoch == null ? "" : epoch, incarnation, body));
        }
        if (incarnation != null) {
            b.header("X-Axe-Incarnation", incarnation);
        }
        if (epoch != null) {
            b.header("X-Axe-Epoch", epoch);
        }
        HttpResponse<byte[]> r = http.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
        return new Reply(r.statusCode(), (Map<String, Object>) Json.parse(r.body()));
    }

    @Override
    public void close() throws Exception {
        release.countDown();
        for (int i = closers.size() - 1; i >= 0; i--) {
            closers.get(i).close();
        }
    }

    public void testRegistersV2WithIncarnation() throws Exception {
        start(c -> {});
        Map<String, Object> reg = sched.registrations.get(0);
        Check.eq("app1", reg.get("app"), "app");
        Check.eq(ex.address(), reg.get("address"), "address");
        Check.eq(2L, reg.get("version"), "version");
        Check.eq("signed", reg.get("auth"), "auth");
        Check.eq("http", reg.get("protocol"), "protocol");
        Check.eq(List.of("echo", "block", "sleep", "fail"), reg.get("handlers"), "handlers");
        Check.isTrue(ex.incarnation().matches("[0-9a-f]{32}"), "incarnation is 32 hex chars: " + ex.incarnation());
        Check.eq(ex.incarnation(), reg.get("incarnation"), "incarnation");
    }

    public void testRunReportsOutputAndFailure() throws Exception {
        start(c -> {});
        Reply r = call("/axe/run", run("t1", "task1", "echo", ",\"params\": {\"b\": [1, 2], \"a\": \"x\"},\"new_field\":7"), null);
        Check.eq(202, r.code(), "accepted");
        Check.eq(Map.of("accepted", true), r.body(), "body");
        Check.waitFor(() -> sched.recordedFor("t1").size() == 1, "the result of t1");
        Map<String, Object> res = sched.recordedFor("t1").get(0);
        Check.eq("success", res.get("status"), "status");
        Check.eq("{\"b\":[1,2],\"a\":\"x\"}", res.get("output"), "output");
        Check.eq("task1", res.get("task"), "task");
        Check.eq(ex.address(), res.get("address"), "address");
        Check.eq(202, call("/axe/run", run("t2", "task2", "fail", ""), null).code(), "accepted");
        Check.waitFor(() -> sched.recordedFor("t2").size() == 1, "the result of t2");
        Check.eq("failed", sched.recordedFor("t2").get(0).get("status"), "failed");
        Check.eq("it broke", sched.recordedFor("t2").get(0).get("error"), "error");
    }

    public void testDedupWhileRunningAndAfterFinishing() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("d1", "task", "block", ""), null).code(), "first");
        Reply dup = call("/axe/run", run("d1", "task", "block", ""), null);
        Check.eq(202, dup.code(), "duplicate while running");
        Check.eq(true, dup.body().get("duplicate"), "duplicate flag");
        release.countDown();
        Check.waitFor(() -> sched.recordedFor("d1").size() == 1, "the result");
        Check.waitFor(() -> ex.pendingResults() == 0, "delivery settled");
        Reply fin = call("/axe/run", run("d1", "task", "block", ""), null);
        Check.eq(200, fin.code(), "duplicate after finishing");
        Check.eq(Map.of("duplicate", true, "status", "success", "error", ""), fin.body(), "finished body");
        Check.waitFor(() -> sched.recordedFor("d1").size() == 2, "the result re-sent");
        Check.eq(0, ex.running(), "the handler did not run again");
    }

    public void testDedupTtlExpires() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("ttl", "task", "echo", ",\"dedup_ttl_ms\":1"), null).code(), "first");
        Check.waitFor(() -> sched.recordedFor("ttl").size() == 1, "the result");
        Check.waitFor(() -> ex.pendingResults() == 0, "delivery settled");
        Thread.sleep(5); // the 1 ms TTL has certainly passed
        Check.eq(202, call("/axe/run", run("ttl", "task", "echo", ""), null).code(), "forgotten after its TTL: runs again");
        Check.waitFor(() -> sched.recordedFor("ttl").size() == 2, "the second result");
    }

    public void testCustomDedupStoreIsUsed() throws Exception {
        InMemoryDedupStore store = new InMemoryDedupStore(10);
        // A store that survives the executor: a ticket finished by a previous process is not
        // run again by the next one.
        store.put("old", new DedupStore.Finished("failed", "boom", Json.bytes(Map.of("ticket", "old", "task", "t")),
                System.currentTimeMillis() + 60_000));
        start(c -> c.dedupStore(store));
        Reply r = call("/axe/run", run("old", "t", "echo", ""), null);
        Check.eq(200, r.code(), "finished earlier");
        Check.eq("boom", r.body().get("error"), "its error");
        Check.waitFor(() -> sched.resultsFor("old") == 1, "its stored result re-sent");
    }

    public void testReentryGuardAndParallel() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("r1", "same", "block", ""), null).code(), "first");
        Reply r = call("/axe/run", run("r2", "same", "block", ""), null);
        Check.eq(409, r.code(), "re-entry refused");
        Check.contains((String) r.body().get("error"), "task \"same\" is already running here with ticket \"r1\"", "error");
        Check.eq(202, call("/axe/run", run("r3", "same", "block", ",\"parallel\":true"), null).code(), "parallel admitted");
        release.countDown();
        Check.waitFor(() -> sched.recordedFor("r1").size() == 1 && sched.recordedFor("r3").size() == 1, "both results");
        Check.eq(202, call("/axe/run", run("r4", "same", "echo", ""), null).code(), "admitted once the task is free");
    }

    public void testEpochFencingPerShard() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("e1", "a", "echo", ",\"epoch\":5"), "5").code(), "epoch 5");
        Reply stale = call("/axe/run", run("e2", "b", "echo", ",\"epoch\":4"), "4");
        Check.eq(409, stale.code(), "epoch 4 after 5");
        Check.eq("stale epoch 4 < 5", stale.body().get("error"), "error");
        Check.eq(202, call("/axe/run", run("e3", "c", "echo", ""), null).code(), "no epoch is judged as before");
        Check.eq(202, call("/axe/run", run("e4", "d", "echo", ",\"epoch\":2,\"shard\":7"), "2").code(),
                "shard 7 at 2 beside an unsharded 5");
        Check.eq(202, call("/axe/run", run("e5", "e", "echo", ",\"epoch\":3,\"shard\":7"), null).code(), "shard 7 at 3");
        Reply s = call("/axe/run", run("e6", "f", "echo", ",\"epoch\":2,\"shard\":7"), null);
        Check.eq(409, s.code(), "shard 7 back at 2");
        Check.eq("stale epoch 2 < 3 of shard 7", s.body().get("error"), "shard error");
        Check.eq(202, call("/axe/run", run("e7", "g", "echo", ",\"epoch\":1,\"shard\":8"), null).code(), "shard 8 is apart");
        Check.eq(3L, ex.shardEpoch(7), "shard 7's epoch");
        Check.eq(5L, ex.epoch(), "the unsharded epoch");
        Check.eq(400, call("/axe/run", run("e8", "h", "echo", ",\"epoch\":6"), "7").code(), "header contradicts body");
        Check.eq(400, call("/axe/run", run("e9", "h", "echo", ""), "x").code(), "malformed header");
        Reply k = call("/axe/kill", "{\"ticket\":\"e1\",\"epoch\":4}", null);
        Check.eq(409, k.code(), "stale kill");
        Check.eq(200, call("/axe/runs", "{\"runs\":[" + run("e10", "i", "echo", "") + "]}", "6").code(), "batch");
        Check.eq(6L, ex.epoch(), "the batch's header epoch raised the epoch");
    }

    public void testKillInterruptsHandler() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("k1", "task", "sleep", ""), null).code(), "accepted");
        Check.waitFor(() -> ex.running() == 1, "running");
        Reply k = call("/axe/kill", "{\"ticket\":\"k1\"}", null);
        Check.eq(200, k.code(), "killed");
        Check.eq(Map.of("killed", true), k.body(), "body");
        Check.waitFor(() -> sched.recordedFor("k1").size() == 1, "the result");
        Check.eq("failed", sched.recordedFor("k1").get(0).get("status"), "status");
        Check.eq("executor: run killed", sched.recordedFor("k1").get(0).get("error"), "error");
        Check.eq(404, call("/axe/kill", "{\"ticket\":\"k1\"}", null).code(), "no longer running");
        Check.eq(400, call("/axe/kill", "{\"ticket\":\"k1\",\"shard\":300}", null).code(), "shard out of range");
        Check.eq(400, call("/axe/kill", "{}", null).code(), "no ticket");
    }

    public void testKillOfQueuedRunNeverStartsIt() throws Exception {
        start(c -> c.poolSize(1));
        Check.eq(202, call("/axe/run", run("q1", "t1", "block", ""), null).code(), "runs");
        Check.eq(202, call("/axe/run", run("q2", "t2", "echo", ""), null).code(), "queued behind it");
        Check.eq(200, call("/axe/kill", "{\"ticket\":\"q2\"}", null).code(), "killed while queued");
        release.countDown();
        Check.waitFor(() -> sched.recordedFor("q2").size() == 1, "the result");
        Check.eq("handler not started: executor: run killed", sched.recordedFor("q2").get(0).get("error"), "error");
    }

    public void testOutputOfObjectsAndLimits() throws Exception {
        start(c -> c.outputLimit(8));
        Check.eq(202, call("/axe/run", run("o1", "t", "echo", ",\"params\":{\"abcdefghij\":1}"), null).code(), "accepted");
        Check.waitFor(() -> sched.recordedFor("o1").size() == 1, "the result");
        Check.eq("ghij\":1}", sched.recordedFor("o1").get(0).get("output"), "the output's last 8 bytes");
        Check.eq("{\"a\":[1,2]}", Json.write(Map.of("a", List.of(1, 2))), "a map as JSON");
        Check.eq("é€😀", Executor.clipTail("xé€😀", 9), "the tail, whole characters only");
        Check.eq("xé", Executor.clipHead("xé€😀", 4), "the head, whole characters only");
        Check.eq("boom (executor: run killed)", Executor.errorOf(new RuntimeException("boom"), "executor: run killed"),
                "an error while cancelled names both");
        Check.eq("context deadline exceeded", Executor.errorOf(new InterruptedException(), "context deadline exceeded"),
                "an interruption reports the cause");
    }

    public void testInMemoryDedupStoreBounds() {
        InMemoryDedupStore s = new InMemoryDedupStore(2);
        long now = System.currentTimeMillis();
        s.put("a", new DedupStore.Finished("success", "", new byte[0], now + 60_000));
        s.put("b", new DedupStore.Finished("success", "", new byte[0], now + 60_000));
        s.put("c", new DedupStore.Finished("failed", "x", new byte[0], now + 60_000));
        Check.eq(2, s.size(), "bounded");
        Check.isTrue(s.get("a", now) == null, "the oldest went first");
        Check.eq("x", s.get("c", now).error(), "the newest is kept");
        Check.isTrue(s.get("b", now + 60_000) == null, "expired at its time");
    }

    public void testDeadlineInterruptsHandler() throws Exception {
        start(c -> {});
        long deadline = System.currentTimeMillis() + 200;
        Check.eq(202, call("/axe/run", "{\"ticket\":\"dl\",\"task\":\"t\",\"handler\":\"sleep\",\"attempt\":1,\"deadline\":" + deadline + "}", null).code(), "accepted");
        Check.waitFor(() -> sched.recordedFor("dl").size() == 1, "the result");
        Check.eq("context deadline exceeded", sched.recordedFor("dl").get(0).get("error"), "error");
    }

    public void testSignatureRequired() throws Exception {
        start(c -> {});
        byte[] body = run("s1", "t", "echo", "").getBytes(StandardCharsets.UTF_8);
        Reply unsigned = call("/axe/run", body, null, ex.incarnation(), false);
        Check.eq(401, unsigned.code(), "unsigned");
        Check.eq("missing or invalid scheduler signature", unsigned.body().get("error"), "error");
        Reply other = call("/axe/run", body, null, "ffffffffffffffffffffffffffffffff", true);
        Check.eq(401, other.code(), "another incarnation");
        Check.contains((String) other.body().get("error"), "signed for another incarnation of this executor", "error");
        Check.eq(401, call("/axe/run", body, null, null, true).code(), "no incarnation header (v1 signature)");
        HttpRequest bad = HttpRequest.newBuilder(URI.create("http://" + ex.address() + "/axe/run"))
                .header("Authorization", Signatures.sign(Signatures.dispatchKey("other-token"), System.currentTimeMillis(),
                        ex.address(), "/axe/run", "", ex.incarnation(), body))
                .header("X-Axe-Incarnation", ex.incarnation())
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
        Check.eq(401, http.send(bad, HttpResponse.BodyHandlers.discarding()).statusCode(), "another token's key");
        HttpRequest old = HttpRequest.newBuilder(URI.create("http://" + ex.address() + "/axe/run"))
                .header("Authorization", Signatures.sign(Signatures.dispatchKey(TOKEN), System.currentTimeMillis() - 6 * 60_000,
                        ex.address(), "/axe/run", "", ex.incarnation(), body))
                .header("X-Axe-Incarnation", ex.incarnation())
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
        Check.eq(401, http.send(old, HttpResponse.BodyHandlers.discarding()).statusCode(), "signed 6 minutes ago");
        HttpRequest probe = HttpRequest.newBuilder(URI.create("http://" + ex.address() + "/axe/beat"))
                .header("Authorization", "Bearer " + TOKEN).GET().build();
        HttpResponse<byte[]> beat = http.send(probe, HttpResponse.BodyHandlers.ofByteArray());
        Check.eq(200, beat.statusCode(), "a probe with the executor's own token");
        Check.eq("app1", ((Map<?, ?>) Json.parse(beat.body())).get("app"), "beat app");
        Check.isTrue(sched.recordedFor("s1").isEmpty(), "nothing ran");
    }

    public void testVersion1SchedulerSignsWithoutIncarnation() throws Exception {
        sched = scheduler();
        sched.version1 = true;
        start(c -> c.heartbeatInterval(Duration.ofMillis(20)));
        byte[] body = run("v1", "t", "echo", "").getBytes(StandardCharsets.UTF_8);
        Check.eq(202, call("/axe/run", body, null, null, true).code(), "a v1 signature from a v1 scheduler");
        Check.eq(401, call("/axe/run", body, null, null, false).code(), "still no unsigned call");
        Check.waitFor(() -> {
            synchronized (sched) {
                return !sched.heartbeats.isEmpty();
            }
        }, "a heartbeat");
        Check.isTrue(!sched.heartbeats.get(0).containsKey("incarnation"), "no incarnation sent to a v1 scheduler");
    }

    public void testUnsignedLargeBodyRefusedBeforeReading() throws Exception {
        start(c -> {});
        String[] hp = ex.address().split(":");
        try (Socket s = new Socket(hp[0], Integer.parseInt(hp[1]))) {
            s.setSoTimeout(30_000);
            OutputStream out = s.getOutputStream();
            // Announce 100 MB and send none of it: the answer must come without the body.
            out.write(("POST /axe/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Content-Length: 100000000\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            byte[] head = new byte[12];
            int n = 0;
            while (n < head.length) {
                int k = in.read(head, n, head.length - n);
                if (k < 0) {
                    break;
                }
                n += k;
            }
            Check.eq("HTTP/1.1 401", new String(head, 0, n, StandardCharsets.US_ASCII), "status line");
        }
    }

    public void testOversizeAndMalformed() throws Exception {
        start(c -> {});
        String big = run("big", "t", "echo", ",\"params\":\"" + "x".repeat(1 << 20) + "\"");
        Reply r = call("/axe/run", big, null);
        Check.eq(413, r.code(), "over 1 MiB");
        Check.contains((String) r.body().get("error"), "1048576", "names the limit");
        Check.eq(400, call("/axe/run", "not json", null).code(), "not JSON");
        Check.contains((String) call("/axe/run", "{\"ticket\":\"a\",\"ticket\":\"b\"}", null).body().get("error"),
                "repeated key", "repeated key");
        Check.contains((String) call("/axe/run", "{\"task\":\"t\",\"attempt\":1,\"deadline\":0}", null).body().get("error"),
                "ticket: required", "missing ticket");
        Check.eq(400, call("/axe/run", run("m1", "t", "echo", "") + " {}", null).code(), "trailing data");
        Check.eq(400, call("/axe/run", run("m1", "t", "echo", ",\"x\":\"\\udc00\""), null).code(), "lone surrogate");
        Check.eq(400, call("/axe/run", new byte[] {'{', '"', (byte) 0xff, '"', ':', '1', '}'}, null, ex.incarnation(), true).code(),
                "invalid UTF-8");
        // ISO-8859-1 writes \u00ff as the lone byte 0xFF: not UTF-8.
        byte[] badTask = run("m1", "t\u00ff", "echo", "").getBytes(StandardCharsets.ISO_8859_1);
        Reply bad = call("/axe/run", badTask, null, ex.incarnation(), true);
        Check.eq(400, bad.code(), "a task of invalid UTF-8");
        Check.contains((String) bad.body().get("error"), "task: invalid UTF-8", "names the field");
        Check.contains((String) call("/axe/run", run("m1", "\\ud800", "echo", ""), null).body().get("error"),
                "task: lone surrogate", "a lone surrogate names the field");
        Reply unknown = call("/axe/run", run("m2", "t", "nope", ""), null);
        Check.eq(404, unknown.code(), "unknown handler");
        Check.eq("unknown handler \"nope\"", unknown.body().get("error"), "error");
        HttpRequest get = HttpRequest.newBuilder(URI.create("http://" + ex.address() + "/axe/run"))
                .header("Authorization", Signatures.sign(Signatures.dispatchKey(TOKEN), System.currentTimeMillis(),
                        ex.address(), "/axe/run", "", ex.incarnation(), new byte[0]))
                .header("X-Axe-Incarnation", ex.incarnation()).GET().build();
        Check.eq(405, http.send(get, HttpResponse.BodyHandlers.discarding()).statusCode(), "GET /axe/run");
    }

    public void testBusyWhenPoolAndQueueFull() throws Exception {
        start(c -> c.poolSize(1).queueSize(1));
        Check.eq(202, call("/axe/run", run("b1", "t1", "block", ""), null).code(), "runs");
        Check.eq(202, call("/axe/run", run("b2", "t2", "block", ""), null).code(), "queued");
        Reply busy = call("/axe/run", run("b3", "t3", "block", ""), null);
        Check.eq(429, busy.code(), "busy");
        Check.eq("busy", busy.body().get("error"), "error");
        release.countDown();
        Check.waitFor(() -> sched.recordedFor("b2").size() == 1, "the queued run finished");
    }

    @SuppressWarnings("unchecked")
    public void testBatchAdmitsEachRunInOrder() throws Exception {
        start(c -> {});
        Reply r = call("/axe/runs", "{\"runs\":[" + run("x1", "bt", "block", "") + "," + run("x2", "bt", "block", "") + ",{\"ticket\":1},"
                + run("x3", "bt2", "nope", "") + "," + run("x1", "bt", "block", "") + "],\"future\":true}", null);
        Check.eq(200, r.code(), "batch");
        List<Object> items = (List<Object>) r.body().get("results");
        int[] want = {202, 409, 400, 404, 202};
        Check.eq(want.length, items.size(), "one item per run");
        for (int i = 0; i < want.length; i++) {
            Check.eq((long) want[i], ((Map<?, ?>) items.get(i)).get("code"), "item " + i);
        }
        Check.eq(true, ((Map<?, ?>) ((Map<?, ?>) items.get(4)).get("body")).get("duplicate"), "the repeat is a duplicate");
        Reply fast = call("/axe/runs", "{\"runs\":[" + run("y1", "fast", "echo", "") + "," + run("y1", "fast", "echo", "") + "]}", null);
        Check.eq(true, ((Map<?, ?>) ((Map<?, ?>) ((List<Object>) fast.body().get("results")).get(1)).get("body")).get("duplicate"),
                "a ticket repeated in one batch is a duplicate of a run not yet started, however fast its handler");
        Check.eq(202L, ((Map<?, ?>) ((List<Object>) fast.body().get("results")).get(1)).get("code"), "202 duplicate");
        StringBuilder many = new StringBuilder("{\"runs\":[");
        for (int i = 0; i < 1001; i++) {
            many.append(i > 0 ? "," : "").append(run("m" + i, "m" + i, "echo", ""));
        }
        Reply tooMany = call("/axe/runs", many.append("]}").toString(), null);
        Check.eq(400, tooMany.code(), "1001 runs");
        Check.contains((String) tooMany.body().get("error"), "at most 1000", "error");
        Check.eq(400, call("/axe/runs", "{\"runs\":[]}", null).code(), "no runs");
        Check.eq(400, call("/axe/runs", "[]", null).code(), "not an object");
    }

    public void testResultResentUntilAcknowledged() throws Exception {
        sched = scheduler();
        sched.failCallbacks.set(3);
        start(c -> {});
        Check.eq(202, call("/axe/run", run("rs", "t", "echo", ""), null).code(), "accepted");
        Check.waitFor(() -> sched.recordedFor("rs").size() == 1, "the result recorded in the end");
        Check.isTrue(sched.resultsFor("rs") >= 4, "sent at least 4 times, got " + sched.resultsFor("rs"));
        Check.waitFor(() -> ex.pendingResults() == 0, "nothing left to send");
    }

    public void testFailoverAcrossSchedulers() throws Exception {
        FakeScheduler backup = scheduler();
        FakeScheduler primary = scheduler();
        backup.backupOf = primary.url();
        // A closed port first, then a backup naming the primary, then the primary.
        String dead;
        try (java.net.ServerSocket ss = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            dead = "http://127.0.0.1:" + ss.getLocalPort();
        }
        sched = primary;
        start(c -> c.schedulers(dead, backup.url(), primary.url()));
        Check.eq(1, primary.registrationCount(), "registered with the primary");
        Check.eq(202, call("/axe/run", run("fo", "t", "echo", ""), null).code(), "accepted");
        Check.waitFor(() -> primary.recordedFor("fo").size() == 1, "the result reached the primary");
    }

    public void testHeartbeat404Reregisters() throws Exception {
        sched = scheduler();
        sched.heartbeatStatus = 404;
        start(c -> c.heartbeatInterval(Duration.ofMillis(20)));
        Check.waitFor(() -> sched.registrationCount() >= 2, "a second registration");
        Map<String, Object> hb;
        synchronized (sched) {
            hb = sched.heartbeats.get(0);
        }
        Check.eq(ex.incarnation(), hb.get("incarnation"), "heartbeat incarnation");
        Check.eq(ex.incarnation(), sched.registrations.get(1).get("incarnation"), "same incarnation again");
        sched.heartbeatStatus = 200;
    }

    public void testRegistrationRejectedFailsStart() throws Exception {
        sched = scheduler();
        sched.wantToken = "something-else";
        ExecutorException e = Check.throwsA(ExecutorException.class, () -> start(c -> {}), "start");
        Check.eq(ExecutorException.Kind.UNAUTHORIZED, e.kind(), "kind");
    }

    public void testGracefulStopDrainsAndDeregisters() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("g1", "t", "block", ""), null).code(), "accepted");
        Thread stopper = new Thread(() -> ex.stop(Duration.ofSeconds(30)));
        stopper.start();
        Check.waitFor(() -> {
            synchronized (sched) {
                return !sched.deregistrations.isEmpty();
            }
        }, "deregistered");
        Map<String, Object> d = sched.deregistrations.get(0);
        Check.eq("app1", d.get("app"), "app");
        Check.eq(ex.address(), d.get("address"), "address");
        Check.eq(ex.incarnation(), d.get("incarnation"), "incarnation");
        Reply r = call("/axe/run", run("g2", "t2", "echo", ""), null);
        Check.eq(503, r.code(), "no new runs while draining");
        Check.eq("executor is stopping", r.body().get("error"), "error");
        Check.isTrue(sched.recordedFor("g1").isEmpty(), "the running handler was not cut short");
        release.countDown();
        stopper.join(30_000);
        Check.isTrue(!stopper.isAlive(), "stop returned");
        Check.eq(1, sched.recordedFor("g1").size(), "the result was delivered before stop returned");
        Check.eq("success", sched.recordedFor("g1").get(0).get("status"), "status");
        Check.isTrue(ex.stop(Duration.ofSeconds(1)), "stopping twice is harmless");
    }

    public void testStopTimeoutCancelsHandlers() throws Exception {
        start(c -> {});
        Check.eq(202, call("/axe/run", run("st", "t", "sleep", ""), null).code(), "accepted");
        Check.waitFor(() -> ex.running() == 1, "running");
        Check.isTrue(!ex.stop(Duration.ofMillis(100)), "not drained in time");
    }

    public void testTlsAndMutualTls() throws Exception {
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("axe-java-tls");
        closers.add(() -> {
            try (var files = java.nio.file.Files.list(dir)) {
                for (java.nio.file.Path p : files.toList()) {
                    java.nio.file.Files.delete(p);
                }
            }
            java.nio.file.Files.delete(dir);
        });
        cert(dir, "server", "IP:127.0.0.1");
        cert(dir, "client", "DNS:scheduler");
        SSLContextHolder.serverTrust = Tls.trusting(dir.resolve("server.crt"));
        javax.net.ssl.SSLContext serverCtx = Tls.server(dir.resolve("server.crt"), dir.resolve("server.key"), dir.resolve("client.crt"));
        start(c -> c.serverTls(serverCtx, true).listen("127.0.0.1:0"));
        Check.eq("https", sched.registrations.get(0).get("protocol"), "registered https");
        byte[] body = run("tls1", "t", "echo", "").getBytes(StandardCharsets.UTF_8);
        HttpRequest req = HttpRequest.newBuilder(URI.create("https://" + ex.address() + "/axe/run"))
                .header("Authorization", Signatures.sign(Signatures.dispatchKey(TOKEN), System.currentTimeMillis(), ex.address(),
                        "/axe/run", "", ex.incarnation(), body))
                .header("X-Axe-Incarnation", ex.incarnation())
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
        HttpClient noCert = HttpClient.newBuilder().sslContext(SSLContextHolder.serverTrust).build();
        Check.throwsA(java.io.IOException.class, () -> noCert.send(req, HttpResponse.BodyHandlers.discarding()),
                "a client without a certificate fails the handshake");
        javax.net.ssl.SSLContext withCert = Tls.server(dir.resolve("client.crt"), dir.resolve("client.key"), dir.resolve("server.crt"));
        HttpClient mtls = HttpClient.newBuilder().sslContext(withCert).build();
        Check.eq(202, mtls.send(req, HttpResponse.BodyHandlers.discarding()).statusCode(), "accepted over mTLS");
        Check.waitFor(() -> sched.recordedFor("tls1").size() == 1, "the result");
    }

    static final class SSLContextHolder {
        static javax.net.ssl.SSLContext serverTrust;
    }

    static void cert(java.nio.file.Path dir, String name, String san) throws Exception {
        Process p = new ProcessBuilder("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-days", "1", "-subj", "/CN=" + name, "-addext", "subjectAltName=" + san,
                "-keyout", dir.resolve(name + ".key").toString(), "-out", dir.resolve(name + ".crt").toString())
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        Check.isTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0, "openssl: " + out);
    }
}
