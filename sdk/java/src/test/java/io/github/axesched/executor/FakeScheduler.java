package io.github.axesched.executor;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A scheduler over real HTTP on loopback that records what executors send it. It can refuse
 * the first callbacks (500), answer heartbeats 404, or act as a backup (503 naming a primary).
 */
final class FakeScheduler implements AutoCloseable {
    final HttpServer server;
    final List<Map<String, Object>> registrations = new ArrayList<>();
    final List<Map<String, Object>> heartbeats = new ArrayList<>();
    final List<Map<String, Object>> deregistrations = new ArrayList<>();
    /** Every result received, including refused ones and each item of a batch. */
    final List<Map<String, Object>> results = new ArrayList<>();
    /** Results answered 200. */
    final List<Map<String, Object>> recorded = new ArrayList<>();
    final AtomicInteger failCallbacks = new AtomicInteger();
    volatile int heartbeatStatus = 200;
    volatile String backupOf;
    volatile String wantToken;
    /** Answer registrations as a scheduler of protocol version 1 (no "version"). */
    volatile boolean version1;

    static {
        System.setProperty("sun.net.httpserver.nodelay", "true");
    }

    FakeScheduler() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        server.setExecutor(Executors.newFixedThreadPool(8, r -> {
            Thread t = new Thread(r, "fake-scheduler");
            t.setDaemon(true);
            return t;
        }));
        server.createContext("/", this::serve);
        server.start();
    }

    String url() {
        return "http://127.0.0.1:" + server.getAddress().getPort();
    }

    @SuppressWarnings("unchecked")
    private void serve(HttpExchange ex) throws IOException {
        try (ex) {
            byte[] body = ex.getRequestBody().readAllBytes();
            String path = ex.getRequestURI().getPath();
            if (backupOf != null) {
                reply(ex, 503, "{\"error\":\"this node is a backup\",\"primary\":" + Json.quote(backupOf) + "}");
                return;
            }
            if (wantToken != null && !("Bearer " + wantToken).equals(ex.getRequestHeaders().getFirst("Authorization"))) {
                reply(ex, 401, "{\"error\":\"missing or invalid token\"}");
                return;
            }
            Map<String, Object> m;
            try {
                m = Json.parseObject(body);
            } catch (Json.ParseException e) {
                reply(ex, 400, "{\"error\":" + Json.quote(e.getMessage()) + "}");
                return;
            }
            switch (path) {
                case "/api/v1/executors/register" -> {
                    synchronized (this) {
                        registrations.add(m);
                    }
                    reply(ex, 200, version1 ? "{\"heartbeat_interval_ms\":10000,\"lost_after_ms\":30000}"
                            : "{\"heartbeat_interval_ms\":10000,\"lost_after_ms\":30000,\"version\":2}");
                }
                case "/api/v1/executors/heartbeat" -> {
                    synchronized (this) {
                        heartbeats.add(m);
                    }
                    reply(ex, heartbeatStatus, heartbeatStatus == 200 ? "{}" : "{\"error\":\"unknown executor\"}");
                }
                case "/api/v1/executors/deregister" -> {
                    synchronized (this) {
                        deregistrations.add(m);
                    }
                    reply(ex, 200, "{\"ok\":true}");
                }
                case "/api/v1/callback" -> {
                    int code = record(m);
                    reply(ex, code, code == 200 ? "{\"ok\":true}" : "{\"error\":\"try later\"}");
                }
                case "/api/v1/callback/batch" -> {
                    StringBuilder b = new StringBuilder("{\"results\":[");
                    List<Object> rs = (List<Object>) m.get("results");
                    for (int i = 0; i < rs.size(); i++) {
                        int code = record((Map<String, Object>) rs.get(i));
                        b.append(i > 0 ? "," : "").append("{\"status\":").append(code).append(code == 200 ? ",\"ok\":true}" : "}");
                    }
                    reply(ex, 200, b.append("]}").toString());
                }
                default -> reply(ex, 404, "{\"error\":\"no such path\"}");
            }
        }
    }

    private synchronized int record(Map<String, Object> r) {
        results.add(r);
        if (failCallbacks.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
            return 500;
        }
        recorded.add(r);
        return 200;
    }

    synchronized int registrationCount() {
        return registrations.size();
    }

    synchronized List<Map<String, Object>> recordedFor(String ticket) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Map<String, Object> r : recorded) {
            if (ticket.equals(r.get("ticket"))) {
                out.add(r);
            }
        }
        return out;
    }

    synchronized int resultsFor(String ticket) {
        int n = 0;
        for (Map<String, Object> r : results) {
            if (ticket.equals(r.get("ticket"))) {
                n++;
            }
        }
        return n;
    }

    private static void reply(HttpExchange ex, int code, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(code, b.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(b);
        }
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
