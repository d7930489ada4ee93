'use strict';
// Reference stand-in of the opencode-v2 candidate server (test fixture code;
// it never ships). Built into a Node 26.4 single-executable application by
// the harness (tests/refhost/nodedist.py) and run by deploy.sh as the service
// user. It speaks upstream opencode v2's HTTP API in the shapes the released
// server answers (TARGET-CONTRACT section 7; tests/test_candidate_contract.py
// compares the two side by side), and does what the pilot's `local-pty`
// plugin does: PTY sessions go through the supervisor, never in process.
// Written independently of the suite: it shares no code with it. The SEA is
// built with --disable-sigusr1 in its execArgv (nodedist.py): SIGUSR1 from any
// process of the service user would otherwise open Node's inspector in it.
//
//   node server.js [--hostname H] [--port P] [--pty-socket PATH] [--pty-client PATH]
// (--pty-socket/--pty-client exist only for the contract test; the candidate
// unit never passes them.)
//
// Auth: HTTP Basic on every route, user "opencode", password OPENCODE_PASSWORD
// (server.env); without a password every request is refused. A refusal is
// 401 with `www-authenticate: Basic realm="Secure Area"`, under /api/ with the
// body {"_tag": "UnauthorizedError", "message": ...}, elsewhere empty.
// Every /api/* reply except health is {"location": L, "data": ...}, L =
// {directory: location[directory] from the query (else the cwd),
//  project: {id: "global", directory: "/"}}.
//   GET    /global/health        {healthy: true, version}
//   GET    /api/health           {healthy: true} (no envelope, as upstream)
//   GET    /, /site.webmanifest, /sw.js, /openapi.json    non-empty 200
//   POST   /api/plugin/await-activation   204 once the plugins have loaded
//   GET    /api/plugin           data [{id, source: {type, ...}, state: {status, error?}}]
//                                for followup and local-pty
//   POST   /api/pty              body {command?, args?, cwd?, title?, env?} (env is
//                                not applied) -> data {id, title, command, args,
//                                cwd, status: "running", pid}; a shell command
//                                (sh, bash, ...) gets "-l" appended, as upstream
//   GET    /api/pty              data: the sessions of the location
//   GET    /api/pty/{id}         data: the session; status "exited" + exitCode
//                                once its helper has ended
//   DELETE /api/pty/{id}         204; the helper is stopped (SIGTERM, it sends
//                                STOP; SIGKILL after 5 s)
// Errors: 404 {"_tag": "PtyNotFoundError", ptyID, message}; 400
// {"_tag": "InvalidRequestError", message, kind}; 415 text/plain; 500
// {"name": "UnknownError", "data": {message, ref}} (the reason goes to stderr).
//
// POST /api/pty, the local-pty way (TARGET-CONTRACT sections 3 and 4): open
// cwd as an O_DIRECTORY descriptor; connect to the supervisor socket, send
// HELLO (u32 BE length 0, type 0x01) and read HELLO_OK (0x81, 16 bytes): ERROR
// (0x85) or anything else fails the create with a 500 and spawns nothing. The
// socket is then paused and the fixed helper spawned with stdio [pipe, pipe,
// pipe, socket, directory], argv `--runtime 3600 -- COMMAND ARGS...`, env
// {PATH, LANG} only; the directory descriptor is closed at once, the paused
// socket kept until the helper ends. Node opens both close-on-exec, so no
// other child ever inherits them. The reply's pid is the helper's.
//
// Fault switches (words in /etc/opencode-reference/candidate-faults, read at
// start):
//   unhealthy             health says healthy=false
//   plugin-failed         local-pty's state is {status: "failed", error}
//   plugin-never-active   plugins stay "loading"; await-activation never answers
//   activation-empty-200-plugins-failed   await-activation answers 200 with an
//                         empty body, and local-pty is "failed"
//   plugin-list-bad-shape GET /api/plugin's data is [{name, status}] (no id)
//   pty-in-process        upstream's way: no supervisor, the PTY is the
//                         runtime's own child (/usr/bin/script in the cwd)
//   connection-to-extra-child   one more child (/bin/sleep) holds the connection
//   directory-to-extra-child    one more child (/bin/sleep) holds the directory
// (the extra children end with their session).
const http = require('node:http');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawn } = require('node:child_process');

const FAULTS_FILE = '/etc/opencode-reference/candidate-faults';
const VERSION = '0.0.0-reference-candidate';
const REALM = 'Basic realm="Secure Area"';
const LOAD_MS = 300; // plugins "load" this long after start
const HELLO_TIMEOUT_MS = 5000;
const KILL_AFTER_MS = 5000;
const MAX_BODY = 1 << 20;
const HELPER_ENV = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' };
const LOGIN_SHELLS = new Set(['bash', 'dash', 'fish', 'ksh', 'sh', 'zsh']);
const PLUGINS = [
  { id: 'followup', source: { type: 'builtin' } },
  { id: 'local-pty', source: { type: 'local', path: '/home/byk/.local/share/opencode-v2-pilot/config/opencode/plugins/pty.ts' } },
];
const HELLO = 0x01, HELLO_OK = 0x81, ERROR = 0x85;

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

function readFaults() {
  try {
    return new Set(fs.readFileSync(FAULTS_FILE, 'utf8').split(/\s+/).filter(Boolean));
  } catch (e) {
    if (e.code === 'ENOENT') return new Set();
    throw e;
  }
}

const port = Number(arg('--port', '14102'));
const host = arg('--hostname', '127.0.0.1');
const ptySocket = arg('--pty-socket', '/run/opencode-pty/supervisor.sock');
const ptyClient = arg('--pty-client', '/usr/local/libexec/opencode-pty-client');
const password = process.env.OPENCODE_PASSWORD || '';
const fault = readFaults();
const started = Date.now();
const expected = password ? 'Basic ' + Buffer.from('opencode:' + password, 'utf8').toString('base64') : null;
const sessions = new Map(); // id -> {info, dir, children, sock}

// -- replies ------------------------------------------------------------------

class Reply extends Error {
  constructor(status, body, type = 'application/json') {
    super(`HTTP ${status}`);
    Object.assign(this, { status, body, type });
  }
}
const invalid = (message, kind) => new Reply(400, { _tag: 'InvalidRequestError', message, kind });
const notFound = (id) => new Reply(404, { _tag: 'PtyNotFoundError', ptyID: id, message: `PTY session not found: ${id}` });

function send(res, status, body = '', type = null, extra = {}) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const headers = { ...extra, 'Content-Length': Buffer.byteLength(text) };
  if (type) headers['Content-Type'] = type;
  res.writeHead(status, headers);
  res.end(text);
}

const pages = {
  '/': ['text/html', '<!doctype html><title>opencode</title><div id="root"></div>\n'],
  '/site.webmanifest': ['application/manifest+json', '{"name":"opencode","start_url":"/"}\n'],
  '/sw.js': ['text/javascript', 'self.addEventListener("fetch", () => {});\n'],
  '/openapi.json': ['application/json', '{"openapi":"3.1.0","info":{"title":"opencode","version":"2"},"paths":{}}\n'],
};

// -- plugins ------------------------------------------------------------------

function pluginState(id) {
  if (fault.has('plugin-never-active') || Date.now() - started < LOAD_MS) return { status: 'loading' };
  if (id === 'local-pty' && (fault.has('plugin-failed') || fault.has('activation-empty-200-plugins-failed'))) {
    return { status: 'failed', error: `cannot reach the PTY supervisor at ${ptySocket}` };
  }
  return { status: 'active' };
}

function pluginList() {
  if (fault.has('plugin-list-bad-shape')) return PLUGINS.map((p) => ({ name: p.id, status: pluginState(p.id).status }));
  return PLUGINS.map((p) => ({ ...p, state: pluginState(p.id) }));
}

// -- PTY sessions ---------------------------------------------------------------

function frame(type, payload = Buffer.alloc(0)) {
  const b = Buffer.alloc(5);
  b.writeUInt32BE(payload.length, 0);
  b[4] = type;
  return Buffer.concat([b, payload]);
}

// Connect, HELLO, HELLO_OK: the authenticated connection, paused (never read again here).
function hello() {
  return new Promise((resolve, reject) => {
    const sock = net.connect(ptySocket);
    let buf = Buffer.alloc(0);
    const done = (err) => {
      clearTimeout(timer);
      sock.off('data', onData).off('close', onClose);
      if (err) {
        sock.destroy();
        reject(new Error(`supervisor ${ptySocket}: ${err}`));
      } else {
        sock.pause();
        resolve(sock);
      }
    };
    const onClose = () => done('connection closed before HELLO_OK');
    const onData = (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 5) return;
      const len = buf.readUInt32BE(0), type = buf[4];
      if (type === ERROR) return done(`ERROR ${buf.length >= 7 ? buf.readUInt16BE(5) : '?'} ${buf.subarray(7, 5 + len)}`);
      if (type !== HELLO_OK || len !== 16) return done(`answered type 0x${type.toString(16)} length ${len}, not HELLO_OK`);
      if (buf.length > 21) return done('sent bytes after HELLO_OK');
      if (buf.length === 21) done(null);
    };
    const timer = setTimeout(() => done(`no HELLO_OK within ${HELLO_TIMEOUT_MS} ms`), HELLO_TIMEOUT_MS);
    sock.on('error', (e) => done(e.message)); // stays: a later error must not crash us
    sock.on('data', onData).on('close', onClose);
    sock.on('connect', () => sock.write(frame(HELLO)));
  });
}

function spawned(child) {
  return new Promise((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject);
  });
}

const sleeper = (fd) => spawn('/bin/sleep', ['3600'], { stdio: ['ignore', 'ignore', 'ignore', fd], env: HELPER_ENV });

async function throughSupervisor(command, args, cwd) {
  const dir = fs.openSync(cwd, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  let sock = null;
  try {
    sock = await hello();
    const helper = spawn(ptyClient, ['--runtime', '3600', '--', command, ...args],
      { stdio: ['pipe', 'pipe', 'pipe', sock, dir], env: HELPER_ENV });
    await spawned(helper);
    const children = [helper];
    if (fault.has('connection-to-extra-child')) children.push(sleeper(sock));
    if (fault.has('directory-to-extra-child')) children.push(sleeper(dir));
    return { helper, children, sock };
  } catch (e) {
    if (sock) sock.destroy();
    throw e;
  } finally {
    fs.closeSync(dir);
  }
}

// pty-in-process: upstream's in-process PTY (here through script(1)), no supervisor.
async function inProcess(command, args, cwd) {
  const line = [command, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const helper = spawn('/usr/bin/script', ['-q', '-e', '-c', line, '/dev/null'], { cwd, stdio: 'pipe', env: HELPER_ENV });
  await spawned(helper);
  return { helper, children: [helper], sock: null };
}

function stop(s) {
  for (const c of s.children) c.kill('SIGTERM');
  if (s.sock) s.sock.destroy();
  setTimeout(() => s.children.forEach((c) => c.exitCode === null && c.signalCode === null && c.kill('SIGKILL')),
    KILL_AFTER_MS).unref();
}

function checkBody(body) {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalid(`Expected object, got ${body === undefined ? 'undefined' : JSON.stringify(body)}`, 'Payload');
  }
  const str = (k) => body[k] === undefined || typeof body[k] === 'string';
  for (const k of ['command', 'cwd', 'title']) if (!str(k)) throw invalid(`Expected string, got ${JSON.stringify(body[k])}\n  at ["${k}"]`, 'Payload');
  if (body.args !== undefined && !(Array.isArray(body.args) && body.args.every((a) => typeof a === 'string'))) {
    throw invalid('Expected an array of strings\n  at ["args"]', 'Payload');
  }
}

async function createPty(body, directory) {
  checkBody(body);
  const command = body.command || process.env.SHELL || '/bin/sh';
  const args = [...(body.args || [])];
  if (LOGIN_SHELLS.has(path.basename(command))) args.push('-l');
  const cwd = body.cwd || directory;
  const id = 'pty_' + crypto.randomBytes(13).toString('hex');
  const s = await (fault.has('pty-in-process') ? inProcess : throughSupervisor)(command, args, cwd);
  const info = { id, title: body.title || `Terminal ${id.slice(-4)}`, command, args, cwd, status: 'running', pid: s.helper.pid };
  sessions.set(id, { info, dir: directory, ...s });
  s.helper.stdin.on('error', () => {}); // kept open: the helper's stdin is the session's input
  s.helper.stdout.resume(); // output is not kept (no connect/WebSocket here)
  s.helper.stderr.on('data', (d) => process.stderr.write(`${id}: ${d}`));
  s.helper.on('exit', (code, signal) => {
    Object.assign(info, { status: 'exited', exitCode: code ?? 128 + (os.constants.signals[signal] || 0) });
    for (const c of s.children) if (c !== s.helper) c.kill('SIGTERM');
    if (s.sock) s.sock.destroy();
  });
  return info;
}

// -- the server ------------------------------------------------------------------

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > MAX_BODY) reject(new Reply(413, 'body too large', 'text/plain'));
      else parts.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

async function jsonBody(req) {
  const raw = await readBody(req);
  if (raw.length === 0) return undefined;
  const type = (req.headers['content-type'] || '').split(';')[0].trim();
  if (type !== 'application/json') throw new Reply(415, `Unsupported content-type: ${type}`, 'text/plain');
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (e) {
    throw invalid(`Invalid JSON: ${e.message}`, 'Payload');
  }
}

async function route(req, url) {
  const p = url.pathname;
  const m = req.method;
  if (m === 'GET' && p === '/global/health') return [200, { healthy: !fault.has('unhealthy'), version: VERSION }];
  if (m === 'GET' && p === '/api/health') return [200, { healthy: !fault.has('unhealthy') }];
  if (m === 'GET' && Object.hasOwn(pages, p)) return [200, pages[p][1], pages[p][0]];
  const directory = url.searchParams.get('location[directory]') || process.cwd();
  if (!path.isAbsolute(directory)) throw new Error(`location directory ${JSON.stringify(directory)} is not absolute`);
  const env = (data) => [200, { location: { directory, project: { id: 'global', directory: '/' } }, data }];
  if (m === 'POST' && p === '/api/plugin/await-activation') {
    if (fault.has('plugin-never-active')) return new Promise(() => {}); // never answers
    await new Promise((r) => setTimeout(r, Math.max(0, LOAD_MS - (Date.now() - started))));
    return fault.has('activation-empty-200-plugins-failed') ? [200, ''] : [204, ''];
  }
  if (m === 'GET' && p === '/api/plugin') return env(pluginList());
  if (p === '/api/pty') {
    if (m === 'GET') return env([...sessions.values()].filter((s) => s.dir === directory).map((s) => s.info));
    if (m === 'POST') return env(await createPty(await jsonBody(req), directory));
  }
  const id = p.startsWith('/api/pty/') ? decodeURIComponent(p.slice('/api/pty/'.length)) : null;
  if (id !== null && !id.includes('/') && (m === 'GET' || m === 'DELETE')) {
    if (!id.startsWith('pty')) throw invalid(`Expected a string starting with "pty", got ${JSON.stringify(id)}\n  at ["ptyID"]`, 'Params');
    const s = sessions.get(id);
    if (!s) throw notFound(id);
    if (m === 'GET') return env(s.info);
    sessions.delete(id);
    stop(s);
    return [204, ''];
  }
  return [404, 'Not Found', 'text/plain'];
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://candidate');
  const api = url.pathname.startsWith('/api/');
  if (expected === null || req.headers.authorization !== expected) {
    req.resume();
    const body = api ? { _tag: 'UnauthorizedError', message: 'Authentication required' } : '';
    return send(res, 401, body, api ? 'application/json' : null, { 'www-authenticate': REALM });
  }
  try {
    const [status, body, type] = await route(req, url);
    send(res, status, body, status === 204 || body === '' ? null : type || 'application/json');
  } catch (e) {
    if (e instanceof Reply) return send(res, e.status, e.body, e.type);
    const ref = 'err_' + crypto.randomBytes(4).toString('hex');
    console.error(`${ref}: ${req.method} ${url.pathname}: ${e.message}`);
    send(res, 500, { name: 'UnknownError', data: { message: 'Unexpected server error. Check server logs for details.', ref } },
      'application/json');
  }
});

server.listen(port, host, () => {
  console.log(`reference candidate on ${host}:${port} (node ${process.version}, supervisor ${ptySocket}, ` +
    `helper ${ptyClient}, faults: ${[...fault].join(',') || 'none'})`);
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    for (const s of sessions.values()) stop(s);
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 1000).unref();
  });
}
