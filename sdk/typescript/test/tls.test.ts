// TLS both ways and client certificates, with certificates made by openssl for the test.

import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { FakeScheduler, call, run, startExecutor, waitFor } from "./helpers.js";

let dir = "";
const pem: Record<string, Buffer> = {};

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
}

/** A CA, and a certificate it signs for name with the given extensions. */
function ca(name: string): void {
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", `${name}.key`,
    "-out", `${name}.pem`, "-subj", `/CN=${name}`, "-days", "2");
}
function issue(name: string, by: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", `${name}.key`,
    "-out", `${name}.csr`, "-subj", `/CN=${name}`);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", `${by}.pem`, "-CAkey", `${by}.key`, "-CAcreateserial",
    "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`);
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), "axe-ts-tls-"));
  ca("ca");
  ca("other-ca");
  issue("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  issue("client", "ca", "extendedKeyUsage=clientAuth\n");
  issue("stranger", "other-ca", "extendedKeyUsage=clientAuth\n");
  for (const n of ["ca", "server", "client", "stranger"]) {
    pem[`${n}.pem`] = readFileSync(join(dir, `${n}.pem`));
    pem[`${n}.key`] = readFileSync(join(dir, `${n}.key`));
  }
});
after(() => rmSync(dir, { recursive: true, force: true }));

test("an executor serving HTTPS with client certificates required, reporting to a scheduler over HTTPS", async () => {
  const s = await FakeScheduler.start(undefined, { cert: pem["server.pem"], key: pem["server.key"] });
  const ex = await startExecutor(s, {
    tlsCert: pem["server.pem"], tlsKey: pem["server.key"], tlsClientCA: pem["ca.pem"], schedulerCA: pem["ca.pem"],
  });
  try {
    const [reg] = s.on("/api/v1/executors/register");
    assert.equal(reg.protocol, "https");
    const body = run({ params: { over: "tls" } });
    const ok = await call(ex, "/axe/run", body, { tls: { ca: pem["ca.pem"], cert: pem["client.pem"], key: pem["client.key"] } });
    assert.equal(ok.status, 202);
    const res = await waitFor("the result over https", () => s.resultOf(JSON.parse(body).ticket));
    assert.equal(res.output, `{"over":"tls"}`);
    // Without a client certificate, or with one of another CA, the handshake fails.
    await assert.rejects(call(ex, "/axe/run", run(), { tls: { ca: pem["ca.pem"] } }));
    await assert.rejects(call(ex, "/axe/run", run(), { tls: { ca: pem["ca.pem"], cert: pem["stranger.pem"], key: pem["stranger.key"] } }));
    // The certificate still needs the signature on top.
    const unsigned = await call(ex, "/axe/run", run(), { sign: false, tls: { ca: pem["ca.pem"], cert: pem["client.pem"], key: pem["client.key"] } });
    assert.equal(unsigned.status, 401);
  } finally {
    await ex.stop();
    await s.stop();
  }
});

test("a scheduler whose certificate the executor does not trust is not reached", async () => {
  const s = await FakeScheduler.start(undefined, { cert: pem["server.pem"], key: pem["server.key"] });
  // Trusting only the other CA: registration fails as a connection error, not as a refusal,
  // so start() succeeds and keeps trying.
  const ex = await startExecutor(s, { schedulerCA: readFileSync(join(dir, "other-ca.pem")) });
  try {
    assert.equal(s.on("/api/v1/executors/register").length, 0);
  } finally {
    await ex.stop(2_000).catch(() => {});
    await s.stop();
  }
});
