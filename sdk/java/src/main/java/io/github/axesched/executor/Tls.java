package io.github.axesched.executor;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * Builds {@link SSLContext}s from PEM files, as the Go SDK's TLSCert/TLSKey/TLSClientCA and
 * SchedulerCA take them. Keys must be PKCS#8 ("BEGIN PRIVATE KEY"; convert others with
 * {@code openssl pkcs8 -topk8 -nocrypt}); RSA and EC keys are read.
 */
public final class Tls {
    private Tls() {}

    /**
     * A context serving certFile (a PEM chain) with keyFile; with clientCaFile (may be null) it
     * trusts client certificates signed by those CAs (pair with
     * {@code Config.serverTls(ctx, true)} for mTLS).
     */
    public static SSLContext server(Path certFile, Path keyFile, Path clientCaFile)
            throws IOException, GeneralSecurityException {
        List<Certificate> chain = certificates(certFile);
        PrivateKey key = privateKey(keyFile);
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        char[] pw = "axe".toCharArray();
        ks.setKeyEntry("executor", key, pw, chain.toArray(new Certificate[0]));
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, pw);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf.getKeyManagers(), clientCaFile == null ? null : trustManagers(clientCaFile), null);
        return ctx;
    }

    /** A client context trusting the CAs of caFile (for https:// schedulers with a private CA). */
    public static SSLContext trusting(Path caFile) throws IOException, GeneralSecurityException {
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, trustManagers(caFile), null);
        return ctx;
    }

    private static javax.net.ssl.TrustManager[] trustManagers(Path caFile) throws IOException, GeneralSecurityException {
        KeyStore ts = KeyStore.getInstance("PKCS12");
        ts.load(null, null);
        int i = 0;
        for (Certificate c : certificates(caFile)) {
            ts.setCertificateEntry("ca" + i++, c);
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ts);
        return tmf.getTrustManagers();
    }

    static List<Certificate> certificates(Path pem) throws IOException, GeneralSecurityException {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        try (InputStream in = Files.newInputStream(pem)) {
            List<Certificate> out = new ArrayList<>(cf.generateCertificates(in));
            if (out.isEmpty()) {
                throw new GeneralSecurityException("no certificate in " + pem);
            }
            return out;
        }
    }

    static PrivateKey privateKey(Path pem) throws IOException, GeneralSecurityException {
        String text = Files.readString(pem);
        String begin = "-----BEGIN PRIVATE KEY-----";
        int a = text.indexOf(begin);
        int b = text.indexOf("-----END PRIVATE KEY-----");
        if (a < 0 || b < a) {
            throw new GeneralSecurityException(pem + ": want a PKCS#8 \"BEGIN PRIVATE KEY\" block");
        }
        byte[] der = Base64.getMimeDecoder().decode(text.substring(a + begin.length(), b));
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        GeneralSecurityException last = null;
        for (String alg : new String[] {"RSA", "EC", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw new GeneralSecurityException(pem + ": not an RSA, EC or Ed25519 key", last);
    }
}
