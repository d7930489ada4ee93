'use strict';
// Reference stand-in of the opencode-v2 candidate server (test fixture code;
// it never ships). Built into a Node 26.4 single-executable application by
// the harness (tests/refhost/nodedist.py) and run by deploy.sh as the
// service user. It answers what the cutover preflight reads and nothing more:
//   GET  /api/health                  {"healthy": true, "version": ...}
//   GET  /, /site.webmanifest, /sw.js, /openapi.json   non-empty 200
//   POST /api/plugin/await-activation {"ok": true} once the plugins have loaded
//   GET  /api/plugin                  [{"name": ..., "status": ...}]
// Every request needs Basic auth, user "opencode", password OPENCODE_PASSWORD
// (from server.env). Written independently of the suite: it shares no code.
//
// Fault switches (words in /etc/opencode-reference/candidate-faults, read at
// start): plugin-failed (local-pty reports "failed"), plugin-never-active
// (plugins stay "loading"), unhealthy (health says healthy=false).
const http = require('node:http');
const fs = require('node:fs');

const FAULTS_FILE = '/etc/opencode-reference/candidate-faults';
const PLUGINS = ['followup', 'local-pty'];
const LOAD_MS = 300; // plugins "load" this long after start

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

function faults() {
  try {
    return new Set(fs.readFileSync(FAULTS_FILE, 'utf8').split(/\s+/).filter(Boolean));
  } catch (e) {
    if (e.code === 'ENOENT') return new Set();
    throw e;
  }
}

const port = Number(arg('--port', '14102'));
const host = arg('--hostname', '127.0.0.1');
const password = process.env.OPENCODE_PASSWORD || '';
const fault = faults();
const started = Date.now();
const expected = password
  ? 'Basic ' + Buffer.from('opencode:' + password, 'utf8').toString('base64')
  : null;

function pluginStatus(name) {
  if (fault.has('plugin-never-active') || Date.now() - started < LOAD_MS) return 'loading';
  if (fault.has('plugin-failed') && name === 'local-pty') return 'failed';
  return 'active';
}

const pages = {
  '/': ['text/html', '<!doctype html><title>opencode</title><div id="root"></div>\n'],
  '/site.webmanifest': ['application/manifest+json', '{"name":"opencode","start_url":"/"}\n'],
  '/sw.js': ['text/javascript', 'self.addEventListener("fetch", () => {});\n'],
  '/openapi.json': ['application/json', '{"openapi":"3.1.0","info":{"title":"opencode","version":"2"},"paths":{}}\n'],
};

function send(res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}
const json = (res, status, value) => send(res, status, 'application/json', JSON.stringify(value) + '\n');

const server = http.createServer((req, res) => {
  if (expected === null || req.headers.authorization !== expected) {
    res.setHeader('WWW-Authenticate', 'Basic realm="opencode"');
    return json(res, 401, { error: 'unauthorized' });
  }
  const path = req.url.split('?')[0];
  if (req.method === 'GET' && path === '/api/health') {
    return json(res, 200, { healthy: !fault.has('unhealthy'), version: 'reference-candidate' });
  }
  if (req.method === 'GET' && path === '/api/plugin') {
    return json(res, 200, PLUGINS.map((name) => ({ name, status: pluginStatus(name) })));
  }
  if (req.method === 'POST' && path === '/api/plugin/await-activation') {
    const wait = Math.max(0, LOAD_MS - (Date.now() - started));
    return setTimeout(() => json(res, 200, { ok: true }), wait);
  }
  if (req.method === 'GET' && Object.hasOwn(pages, path)) {
    const [type, body] = pages[path];
    return send(res, 200, type, body);
  }
  return json(res, 404, { error: 'not found' });
});

server.listen(port, host, () => {
  console.log(`reference candidate on ${host}:${port} (node ${process.version}, faults: ${[...fault].join(',') || 'none'})`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
