package io.github.axesched.executor;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import javax.net.ssl.SSLContext;

/**
 * Calls to the scheduler with failover (docs/protocol.md, Failover): each call starts with the
 * address that answered last; a connection error or a 503 moves on to the next (or to the
 * primary a backup names, when it is one of the configured addresses); each address is tried
 * at most once per call.
 */
final class SchedulerClient {
    /** An answer: its status and body. */
    record Response(int status, byte[] body) {}

    private final List<String> bases;
    private final HttpClient http;
    private final Duration timeout;
    private final String bearer;
    private volatile int current;

    SchedulerClient(List<String> bases, String token, Duration timeout, SSLContext tls) {
        this.bases = new ArrayList<>();
        for (String b : bases) {
            this.bases.add(b.endsWith("/") ? b.substring(0, b.length() - 1) : b);
        }
        HttpClient.Builder b = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(timeout)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (tls != null) {
            b.sslContext(tls);
        }
        this.http = b.build();
        this.timeout = timeout;
        this.bearer = token == null || token.isEmpty() ? null : "Bearer " + token;
    }

    /**
     * Posts body to path, failing over as described above. Returns the first answer other than
     * 503, else the last 503; throws when every address failed to connect.
     */
    Response post(String path, byte[] body) throws IOException {
        int n = bases.size();
        boolean[] tried = new boolean[n];
        int idx = current;
        Response last503 = null;
        IOException lastError = null;
        for (int k = 0; k < n; k++) {
            tried[idx] = true;
            Response r;
            try {
                r = send(bases.get(idx) + path, body);
            } catch (IOException e) {
                lastError = e;
                idx = nextUntried(tried, idx);
                continue;
            }
            if (r.status() != 503) {
                current = idx;
                return r;
            }
            last503 = r;
            int hinted = primaryHint(r.body());
            idx = hinted >= 0 && !tried[hinted] ? hinted : nextUntried(tried, idx);
        }
        if (last503 != null) {
            return last503;
        }
        throw lastError != null ? lastError : new IOException("no scheduler address");
    }

    private static int nextUntried(boolean[] tried, int from) {
        for (int i = 1; i <= tried.length; i++) {
            int j = (from + i) % tried.length;
            if (!tried[j]) {
                return j;
            }
        }
        return from;
    }

    /** The index of the primary a backup's 503 names, if it is a configured address; else -1. */
    private int primaryHint(byte[] body) {
        try {
            Object v = Json.parse(body);
            if (v instanceof Map<?, ?> m && m.get("primary") instanceof String p && !p.isEmpty()) {
                String want = p.endsWith("/") ? p.substring(0, p.length() - 1) : p;
                return bases.indexOf(want);
            }
        } catch (Json.ParseException e) {
            // not a backup's answer
        }
        return -1;
    }

    private Response send(String url, byte[] body) throws IOException {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url))
                .timeout(timeout)
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofByteArray(body));
        if (bearer != null) {
            b.header("Authorization", bearer);
        }
        try {
            HttpResponse<byte[]> r = http.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
            return new Response(r.statusCode(), r.body());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted calling " + url);
        }
    }
}
